-- Invariants of the orders database. Each query below is named by its
-- "-- name:" line and returns the rows that break its invariant: none when
-- the database is healthy. They only read. store.CheckInvariants runs them
-- all; an operator can run them with psql, from the repository root:
--
--   PGOPTIONS='-c default_transaction_read_only=on' \
--     psql -X -a -v ON_ERROR_STOP=1 -d "$DATABASE_URL" -f orders/store/invariants.sql
--
-- Keep every query a single statement ending with a semicolon, with no
-- parameters and no psql meta-commands: the store reads this file too.

-- name: non_negative_stock
-- No product has fewer than zero units available. The CHECK constraint on
-- product_stock.available forbids it; a row here means the schema was
-- bypassed (constraint dropped, restore, hand edit).
SELECT product_id, available
FROM product_stock
WHERE available < 0
ORDER BY product_id;

-- name: one_order_per_idempotency_key
-- No (user_id, idempotency_key) has more than one order. The UNIQUE
-- constraint orders_user_idempotency_unique forbids it; a row here means a
-- request was sold twice in a database that lost the constraint.
SELECT user_id, idempotency_key, count(*) AS orders,
       string_agg(order_id, ', ' ORDER BY order_id) AS order_ids
FROM orders
GROUP BY user_id, idempotency_key
HAVING count(*) > 1
ORDER BY user_id, idempotency_key;

-- name: stock_balance
-- For every product, the units available plus the quantities of the order
-- lines that hold stock equal the units stocked (product_stock.stocked,
-- kept by SeedProduct). Every order state holds its lines except
-- CANCELLED, the one move that gives them back (Status.Holds). A row here
-- means stock moved without an order: leaked, sold twice, or changed by
-- hand without stocked.
SELECT ps.product_id, ps.stocked, ps.available, COALESCE(h.held, 0) AS held,
       ps.available + COALESCE(h.held, 0) - ps.stocked AS difference
FROM product_stock ps
LEFT JOIN (
    SELECT l.product_id, sum(l.quantity) AS held
    FROM order_lines l JOIN orders o ON o.order_id = l.order_id
    WHERE o.status IN ('CREATED', 'PAYING', 'PAID', 'PAYMENT_FAILED')
    GROUP BY l.product_id
) h ON h.product_id = ps.product_id
WHERE ps.available + COALESCE(h.held, 0) <> ps.stocked
ORDER BY ps.product_id;

-- name: order_lines_add_up
-- Every order has lines, and they add up to it: its quantity is the units
-- of its lines, its amount their amounts, and a one-line order names the
-- line's product (a cart, several lines, names none). A row here means an
-- order whose stock lives elsewhere than it says: restocking it would
-- return the wrong units.
SELECT o.order_id, o.product_id, o.quantity, o.amount_cents,
       COALESCE(sum(l.quantity), 0) AS line_units, COALESCE(sum(l.amount_cents), 0) AS line_amount,
       count(l.product_id) AS lines
FROM orders o LEFT JOIN order_lines l ON l.order_id = o.order_id
GROUP BY o.order_id
HAVING count(l.product_id) = 0
    OR o.quantity <> sum(l.quantity)
    OR o.amount_cents <> sum(l.amount_cents)
    OR (count(l.product_id) = 1) <> (o.product_id IS NOT NULL)
    OR (o.product_id IS NOT NULL AND o.product_id <> min(l.product_id))
ORDER BY o.order_id;

-- name: one_charge_per_payment_request
-- No payment request is charged more than once, as far as the database can
-- see: the provider's ledger is not in it. Three ways a second charge shows:
--  * one payment request id with several payments rows (the primary key
--    forbids it);
--  * one order with several SUCCEEDED payments: it was charged under two
--    payment request ids;
--  * one payment request with several provider references of successful
--    charges, from its payments row and its provider callbacks
--    (payment_events): a provider idempotent on the request id reports the
--    one charge under one reference, so two references are two charges.
SELECT 'several payments rows for one payment request' AS problem,
       string_agg(DISTINCT order_id, ', ') AS order_ids,
       payment_request_id AS payment_request_ids,
       string_agg(DISTINCT NULLIF(provider_ref, ''), ', ') AS provider_refs
FROM payments
GROUP BY payment_request_id
HAVING count(*) > 1
UNION ALL
SELECT 'several succeeded payments for one order',
       order_id,
       string_agg(payment_request_id, ', ' ORDER BY payment_request_id),
       string_agg(NULLIF(provider_ref, ''), ', ' ORDER BY payment_request_id)
FROM payments
WHERE status = 'SUCCEEDED'
GROUP BY order_id
HAVING count(*) > 1
UNION ALL
SELECT 'several provider references for one payment request',
       (SELECT string_agg(DISTINCT p.order_id, ', ') FROM payments p
        WHERE p.payment_request_id = refs.payment_request_id),
       refs.payment_request_id,
       string_agg(refs.provider_ref, ', ' ORDER BY refs.provider_ref)
FROM (
    SELECT payment_request_id, provider_ref FROM payments
    WHERE status = 'SUCCEEDED' AND provider_ref <> ''
    UNION
    SELECT payment_request_id, provider_ref FROM payment_events
    WHERE status = 'SUCCEEDED' AND provider_ref <> ''
) refs
GROUP BY refs.payment_request_id
HAVING count(*) > 1
ORDER BY 1, 2, 3;
