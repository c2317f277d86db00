-- Provider callbacks, one row per provider event id: a callback settles its
-- payment once, and a replay of the same event finds its row.

-- +goose Up
CREATE TABLE IF NOT EXISTS payment_events (
    event_id           text        PRIMARY KEY,
    payment_request_id text        NOT NULL REFERENCES payments (payment_request_id),
    status             text        NOT NULL CHECK (status IN ('SUCCEEDED', 'FAILED')),
    provider_ref       text        NOT NULL DEFAULT '',
    received_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS payment_events_request_idx ON payment_events (payment_request_id);

-- +goose Down
DROP TABLE IF EXISTS payment_events;
