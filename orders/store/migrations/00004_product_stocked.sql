-- The stock put into each product, for the stock balance invariant:
-- available plus the quantities of orders that hold stock (every state but
-- CANCELLED) equals stocked. SeedProduct keeps it: creating a product stocks
-- its available units, resetting them adds (or takes out) the difference.
-- Rows that exist already get their current balance, the best record there
-- is of what was put in before the column was kept; both tables are locked
-- against writes meanwhile, so no order or cancel slips between the two.

-- +goose Up
LOCK TABLE orders, product_stock IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE product_stock ADD COLUMN IF NOT EXISTS stocked bigint;

UPDATE product_stock ps
SET stocked = ps.available + COALESCE((
    SELECT sum(o.quantity) FROM orders o
    WHERE o.product_id = ps.product_id AND o.status <> 'CANCELLED'), 0)
WHERE ps.stocked IS NULL;

ALTER TABLE product_stock ALTER COLUMN stocked SET NOT NULL;

-- +goose Down
ALTER TABLE product_stock DROP COLUMN IF EXISTS stocked;
