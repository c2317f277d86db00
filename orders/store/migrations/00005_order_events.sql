-- The transactional outbox. A trigger on orders writes one event per
-- change that downstream services react to, inside the transaction that
-- makes the change: an event exists if and only if its change committed,
-- whichever code path (or hand-written SQL) made it. A relay publishes the
-- unsent rows to a Redis Stream and marks them sent (orders/events).
--
-- event_id is stable: the order id and the event type. Each of the three
-- types happens at most once per order (PAID and CANCELLED are reached
-- once; the state machine has no way back), so the id of a change never
-- depends on which relay sent it or how often.

-- +goose Up
CREATE TABLE IF NOT EXISTS order_events (
    id         bigserial   PRIMARY KEY,
    event_id   text        NOT NULL UNIQUE,
    order_id   text        NOT NULL, -- no foreign key: an event records what happened, even if the row is later removed by hand
    type       text        NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.cancelled')),
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz,
    stream_id  text
);

-- The relay's queue: unsent rows in commit order of their ids.
CREATE INDEX IF NOT EXISTS order_events_unsent_idx ON order_events (id) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS order_events_sent_idx ON order_events (sent_at) WHERE sent_at IS NOT NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION order_events_emit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        t := 'order.created';
    ELSIF NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    ELSIF NEW.status = 'PAID' THEN
        t := 'order.paid';
    ELSIF NEW.status = 'CANCELLED' THEN
        t := 'order.cancelled';
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO order_events (event_id, order_id, type, payload)
    VALUES (NEW.order_id || '/' || t, NEW.order_id, t, jsonb_build_object(
        'orderId', NEW.order_id,
        'userId', NEW.user_id,
        'productId', NEW.product_id,
        'quantity', NEW.quantity,
        'amountCents', NEW.amount_cents,
        'status', NEW.status))
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS orders_emit_events ON orders;
CREATE TRIGGER orders_emit_events
    AFTER INSERT OR UPDATE OF status ON orders
    FOR EACH ROW EXECUTE FUNCTION order_events_emit();

-- Orders that exist already get their creation event (sent_at NULL: the
-- relay publishes them), so a consumer that starts now sees every order.
INSERT INTO order_events (event_id, order_id, type, payload, created_at)
SELECT o.order_id || '/order.created', o.order_id, 'order.created', jsonb_build_object(
        'orderId', o.order_id, 'userId', o.user_id, 'productId', o.product_id,
        'quantity', o.quantity, 'amountCents', o.amount_cents, 'status', o.status), o.created_at
FROM orders o
ON CONFLICT (event_id) DO NOTHING;

-- +goose Down
DROP TRIGGER IF EXISTS orders_emit_events ON orders;
DROP FUNCTION IF EXISTS order_events_emit();
DROP TABLE IF EXISTS order_events;
