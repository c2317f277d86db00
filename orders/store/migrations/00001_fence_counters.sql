-- Fence counters for fencing.Issuer. The table definition is fencing.Schema,
-- verbatim; a test keeps the two in step.

-- +goose Up
CREATE TABLE IF NOT EXISTS fence_counters (
    resource text PRIMARY KEY,
    value    bigint NOT NULL CHECK (value > 0)
);

-- +goose Down
DROP TABLE IF EXISTS fence_counters;
