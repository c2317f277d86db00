-- Carts: an order holds one line per product. order_lines is where an
-- order's stock lives: every order has at least one line (a single-product
-- order exactly one), and the stock balance, the restocks and the events
-- read the lines. orders.product_id is kept for a one-line order (NULL for
-- a cart) and orders.quantity is the units of every line; request_outcomes
-- does the same for a saved out-of-stock answer.
--
-- The foreign key to orders is checked at commit, so an order's lines are
-- written before the order itself, and the order's creation event (written
-- by the trigger on INSERT INTO orders) can carry them.

-- +goose Up
CREATE TABLE IF NOT EXISTS order_lines (
    order_id     text   NOT NULL REFERENCES orders (order_id) DEFERRABLE INITIALLY DEFERRED,
    product_id   text   NOT NULL REFERENCES product_stock (product_id),
    quantity     bigint NOT NULL CHECK (quantity > 0),
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
    fence        bigint NOT NULL CHECK (fence > 0),
    PRIMARY KEY (order_id, product_id)
);

CREATE INDEX IF NOT EXISTS order_lines_product_idx ON order_lines (product_id);

INSERT INTO order_lines (order_id, product_id, quantity, amount_cents, fence)
SELECT order_id, product_id, quantity, amount_cents, fence FROM orders
ON CONFLICT DO NOTHING;

ALTER TABLE orders ALTER COLUMN product_id DROP NOT NULL;
ALTER TABLE request_outcomes ALTER COLUMN product_id DROP NOT NULL;

-- Every event carries the order's lines, sorted by product.
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
        'status', NEW.status,
        'lines', (SELECT COALESCE(jsonb_agg(jsonb_build_object(
                'productId', l.product_id, 'quantity', l.quantity, 'amountCents', l.amount_cents)
                ORDER BY l.product_id), '[]'::jsonb)
            FROM order_lines l WHERE l.order_id = NEW.order_id)))
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
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
ALTER TABLE request_outcomes ALTER COLUMN product_id SET NOT NULL;
ALTER TABLE orders ALTER COLUMN product_id SET NOT NULL;
DROP TABLE IF EXISTS order_lines;
