-- A write that reads need before they answer: a transaction's commit waits
-- for the synchronous standby only when the transaction wrote WAL, and a
-- read writes none. store.AwaitDurable upserts one row of this table (one
-- per backend, modulo 64) so that the commit of a read waits too; once it
-- returns, what the read saw is on the standby. The rows hold nothing
-- else.

-- +goose Up
CREATE TABLE IF NOT EXISTS sync_marks (
    slot int         PRIMARY KEY,
    at   timestamptz NOT NULL
);

-- +goose Down
DROP TABLE IF EXISTS sync_marks;
