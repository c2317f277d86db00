-- Stock, orders, saved non-order outcomes and payments for POST /orders.

-- +goose Up
CREATE TABLE IF NOT EXISTS product_stock (
    product_id  text   PRIMARY KEY,
    available   bigint NOT NULL CHECK (available >= 0),
    last_fence  bigint NOT NULL DEFAULT 0,
    price_cents bigint NOT NULL DEFAULT 0 CHECK (price_cents >= 0)
);

CREATE TABLE IF NOT EXISTS orders (
    order_id            text        PRIMARY KEY,
    user_id             text        NOT NULL,
    product_id          text        NOT NULL REFERENCES product_stock (product_id),
    quantity            bigint      NOT NULL CHECK (quantity > 0),
    amount_cents        bigint      NOT NULL CHECK (amount_cents >= 0),
    idempotency_key     text        NOT NULL,
    request_fingerprint text        NOT NULL,
    status              text        NOT NULL
        CHECK (status IN ('CREATED', 'PAYING', 'PAID', 'PAYMENT_FAILED', 'CANCELLED')),
    response_status     integer     NOT NULL CHECK (response_status BETWEEN 100 AND 599),
    response_body       bytea       NOT NULL,
    fence               bigint      NOT NULL CHECK (fence > 0),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orders_user_idempotency_unique UNIQUE (user_id, idempotency_key)
);

CREATE INDEX IF NOT EXISTS orders_status_updated_idx ON orders (status, updated_at);

-- Final answers to POST /orders that are not orders (out of stock), kept so
-- that they replay from Postgres when the Redis record is gone.
CREATE TABLE IF NOT EXISTS request_outcomes (
    user_id             text        NOT NULL,
    idempotency_key     text        NOT NULL,
    request_fingerprint text        NOT NULL,
    outcome             text        NOT NULL CHECK (outcome IN ('OUT_OF_STOCK')),
    product_id          text        NOT NULL,
    quantity            bigint      NOT NULL,
    response_status     integer     NOT NULL CHECK (response_status BETWEEN 100 AND 599),
    response_body       bytea       NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, idempotency_key)
);

-- One row per payment request; payment_request_id is the stable id sent to
-- the provider, so a retried charge is recognised as the same one.
CREATE TABLE IF NOT EXISTS payments (
    payment_request_id text        PRIMARY KEY,
    order_id           text        NOT NULL REFERENCES orders (order_id),
    amount_cents       bigint      NOT NULL CHECK (amount_cents >= 0),
    status             text        NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED')),
    provider_ref       text        NOT NULL DEFAULT '',
    attempts           integer     NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS payments_order_idx ON payments (order_id);
CREATE INDEX IF NOT EXISTS payments_pending_idx ON payments (updated_at) WHERE status = 'PENDING';

-- +goose Down
DROP TABLE IF EXISTS payments;
DROP TABLE IF EXISTS request_outcomes;
DROP TABLE IF EXISTS orders;
DROP TABLE IF EXISTS product_stock;
