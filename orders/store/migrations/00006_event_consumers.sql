-- What the consumers of the order events keep. consumed_events is the
-- exact deduplication record: a consumer inserts (its group, the event id)
-- in the transaction that applies the event's effect, so an event whose
-- Redis dedup record expired or was lost still cannot apply twice.
-- shipments is the sample consumer's effect (cmd/shipper): one reservation
-- per paid order. It has no UNIQUE on order_id on purpose: it stands for
-- an effect outside any constraint (a carrier's API), so that only the
-- deduplication keeps it single, and the tests can see a double.

-- +goose Up
CREATE TABLE IF NOT EXISTS consumed_events (
    consumer_group text        NOT NULL,
    event_id       text        NOT NULL,
    consumed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, event_id)
);

CREATE INDEX IF NOT EXISTS consumed_events_at_idx ON consumed_events (consumed_at);

CREATE TABLE IF NOT EXISTS shipments (
    shipment_id bigserial   PRIMARY KEY,
    order_id    text        NOT NULL,
    event_id    text        NOT NULL,
    product_id  text        NOT NULL,
    quantity    bigint      NOT NULL CHECK (quantity > 0),
    reserved_by text        NOT NULL,
    reserved_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS shipments_order_idx ON shipments (order_id);

-- +goose Down
DROP TABLE IF EXISTS shipments;
DROP TABLE IF EXISTS consumed_events;
