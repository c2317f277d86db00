// Package events carries the order events to the services downstream
// (shipping, notifications) with a transactional outbox, a Redis Stream
// and consumers that process each event once although the stream delivers
// it at least once.
//
// The chain, and where each guarantee comes from:
//
//   - Outbox. A trigger on the orders table (migration 00005) writes an
//     order_events row in the transaction that creates an order, pays it or
//     cancels it. An event exists if and only if its change committed, and
//     its id is stable: the order id and the type.
//   - Relay. A [Relay] takes unsent rows with FOR UPDATE SKIP LOCKED, adds
//     them to the stream (XADD with MAXLEN ~) and marks them sent, in one
//     transaction. Relays on several instances never hold the same row at
//     once. A relay that dies between the XADD and the commit leaves the
//     rows unsent, and they are sent again: the stream may hold an event
//     twice. That is the at-least-once half.
//   - Consumers. A [Consumer] reads with a consumer group (XREADGROUP),
//     acknowledges with XACK once the effect is done, and takes over the
//     messages of a consumer that died (XAUTOCLAIM). A message is delivered
//     again when its consumer dies or its ACK is lost, and the same event
//     may arrive twice from the relay. Deduplication makes the repeats
//     harmless, in one of two modes:
//   - Exact ([NewExact]). A claim SET consumed:{group}:{event id} NX PX
//     (processing lease) keeps two consumers off one event at a time, and
//     a done record (EX window) answers repeats without Postgres. The
//     effect runs in a Postgres transaction that also inserts the UNIQUE
//     row (consumer_group, event_id): a repeat whose Redis record expired,
//     was evicted or was never written still finds the row and applies
//     nothing. Effectively once, for effects that live in that database.
//   - Approximate ([NewApproximate]). A Bloom filter ([MemoryFilter] in
//     process, or [RedisFilter], a bitmap all the group's consumers share)
//     says whether the event was seen. A false positive skips an event that
//     was never processed, at the filter's stated rate; two consumers on
//     one redelivered message at the same moment may both process it. For
//     effects that tolerate a rare miss or repeat: a notification, a cache
//     refresh, a metric; never for money or stock.
//
// Events of one order may arrive out of order (relays publish in parallel,
// redeliveries come late): a consumer decides from the event, not from its
// position in the stream.
package events
