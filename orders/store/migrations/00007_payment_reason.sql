-- Why a payment is still open, or why it failed: written when a charge
-- cannot be settled yet (no answer, the provider still deciding) and when a
-- payment ends FAILED without a decline (the provider refused the request
-- itself), so the 202 of a pay and the reconciler can say what they wait
-- for, and a failed order shows its cause.

-- +goose Up
ALTER TABLE payments ADD COLUMN IF NOT EXISTS reason text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE payments DROP COLUMN IF EXISTS reason;
