// Package gateway runs a webhook sink as a fan-out gateway: one binlog
// stream, read and decoded once, feeds every endpoint of the sink, each with
// its own cursor (its checkpoint), queue, retries and dead letters.
//
// It promises:
//
//   - one stream: the sink's replication connections are 1 + the endpoints
//     catching up (at most MaxCatchUp at once), never one per endpoint
//     (beside them, a resuming pipeline's check of its checkpoint's commit
//     time reads one event with a short dump of its own, one at a time:
//     canal.CommitFinder);
//   - isolation: an endpoint that cannot keep up is detached when its queue
//     is full; it catches up from its own cursor on a stream of its own
//     (waiting its turn for one of MaxCatchUp) and re-joins the shared
//     stream once it has read everything the shared stream has handed on.
//     The shared stream waits for no endpoint longer than DetachAfter (in
//     all, within 10s) while another has room in its queue (it may also
//     wait to wake one, at MaxAwake: see below); one that holds
//     no one back (alone, or all are behind) is waited for while it takes
//     transactions, rather than given a catch-up stream that would decode
//     the binlog a second time;
//   - exactly the events it would get alone: an endpoint is handed the
//     events its filter matches, in binlog order, each once (no duplicates
//     on detach or re-join: both are decided at a transaction boundary
//     against positions), and its cursor moves over transactions it has no
//     events in, so restart and prune are not held back by quiet endpoints;
//   - nothing lost while an endpoint does not run (disabled, off, invalid,
//     stopped): it keeps a cursor where it stopped or came into being
//     (Endpoint.Held, HoldLocked save one it lacks) and catches up from it
//     once it runs; each such cursor shows on /endpoints and the oldest in
//     outbox_relay_gateway_held_cursor_age_seconds;
//   - bounded memory: per awake endpoint, its queue (QueueTxns
//     transactions) and its pipeline's in-flight limits;
//   - bounded awake endpoints (HubConfig.MaxAwake, with Config.SharedKey):
//     at most MaxAwake of the endpoints the hub woke are on the shared
//     stream at once, so one event to every endpoint of a large table does
//     not wake them all together. When the stream must wake one more, it
//     waits, under its lock and with the transaction whole: no event is
//     dropped, skipped or handed on out of order, and it looks over the
//     awake endpoints at most every 20ms rather than spins (a look that
//     finds room for several lets that many wake). While it waits, every awake endpoint that holds
//     nothing (its pipeline Settled, as for Linger) and has no event of
//     the transaction being handed on is let go at once, whatever its
//     Linger (a transaction's events go to its awake endpoints before its
//     idle ones are woken, so no awake endpoint holds the wait up with
//     events of it); without that pressure Linger keeps its meaning
//     (TestTheSharedStreamWaitsAtMaxAwakeAndLosesNothing). Not counted:
//     endpoints whose last attempts failed (Failing: a receiver that is
//     down never holds the stream back; TestFailingEndpointsDoNotHoldTheStreamAtMaxAwake),
//     endpoints whose sink was built ahead (they stay awake once woken),
//     endpoints the gateway started rather than woke (behind at start,
//     without Config.SharedKey), and endpoints off the shared stream
//     (detached, catching up: MaxCatchUp bounds their streams). When every
//     awake endpoint is stuck (none can be let go and none is failing: a
//     receiver that takes minutes to answer, a pipeline that cannot start)
//     for 10s on the hub's clock, the stream goes on past the bound, with
//     a warning, until fewer than MaxAwake are awake again
//     (TestStuckEndpointsStallTheStreamAtMostAwakeStall): memory then grows
//     by an awake endpoint's cost for each endpoint woken over the bound.
//     The bound only delays wakes: a woken endpoint is woken, detached,
//     caught up and let go exactly as without it, so every other promise
//     here holds as stated;
//   - idle endpoints cost nothing but their state (with Config.SharedKey,
//     as the relay runs every webhook sink): an endpoint with nothing in
//     flight is a record in the hub's index (an idle Tap: its key, its
//     filter's route, its own cursor if it has one), with no queue, no
//     pipeline and no goroutine, and the hub's sweep does not visit it
//     (TestAnIdleEndpointHasNoGoroutine). When the shared stream has
//     events for it, the hub wakes it, under its lock and without I/O: a
//     tap attached at the position before that transaction, and a
//     pipeline (its sink built by Endpoint.Open, on the pipeline's own
//     goroutine) starting from its cursor. Once it has had no event for
//     HubConfig.Linger (at once while the stream waits at MaxAwake) and
//     its pipeline holds nothing (every event
//     acknowledged and its cursor saved: pipeline.Settled), it is let go,
//     decided under the hub's lock, so no event comes between: its
//     pipeline ends and closes the sink Open built, and nothing of it is
//     kept: the endpoint is an idle Tap again, its record holding no
//     pipeline (TestReleasedEndpointsHoldNoMemory); once a wave of wakes
//     has gone idle, Config.Settled lets the relay give their memory back.
//     A new pipeline of an endpoint starts only once its last one has
//     ended (TestAnEventAsTheEndpointIsReleasedIsDeliveredOnce). An endpoint
//     whose sink was built ahead (Endpoint.Sink) stays awake once woken:
//     its pipeline closes its sink when it ends;
//   - cursors by exception (Config.SharedKey): the sink has one shared
//     cursor S, saved under a reserved key (SharedKey). An endpoint with
//     no cursor of its own has delivered every event of its up to S. S
//     moves (a save every 300ms at most, only when it moved) to the
//     shared stream's position, or to the base (the position before its
//     first transaction) of a woken endpoint whose pipeline has no durable
//     cursor yet (pipeline.Stored; it saves its start at once), whichever
//     is first, and never back. The write that moves S to or past an
//     idle endpoint's own cursor deletes that cursor, in one atomic write
//     (checkpoint.BatchWriter): the endpoint had no event in between, or
//     it would have woken (S's last save, as Run ends, deletes none: the
//     next run's do, and the scaled-out gateway's partition may have a new
//     owner by then, whose pipelines write those keys). So a save's bytes
//     grow with the endpoints that
//     moved, never with all of them
//     (TestASavesBytesDoNotGrowWithIdleEndpoints). Endpoints that do not
//     run (disabled, off, invalid, stopped) and endpoints behind the
//     stream (detached, catching up, far behind at start) keep cursors of
//     their own, as do awake ones (their pipelines save them); an idle
//     endpoint taken out (a row turned off) gets one where the stream is.
//     Prune and `status` see S for an endpoint without a cursor of its own
//     (CursorOf; keys with a partition's suffix, FanOutParams.Suffix, read
//     that partition's S: the scaled-out gateway keeps one S per
//     partition, SharedKey(sink + suffix)). At start, an endpoint with a cursor of its own starts
//     from it (idle if it covers the shared stream's start, catching up
//     if not); the others are idle at S. A checkpoint of a version before
//     S (a cursor per endpoint) works: its cursors are exceptions, deleted
//     as S passes them (TestAnOldCheckpointFileRestartsWithoutLoss). A
//     version before S run on a checkpoint written by this one starts the
//     endpoints without a cursor at checkpoint.start: not supported. Across
//     a SIGKILL at any moment: nothing is lost (S never passes an event
//     an endpoint without a durable cursor of its own has not
//     acknowledged); an idle endpoint sends nothing twice (its cursor, or
//     S, is at or after its last event); an awake one re-sends at most
//     its pipeline's in-flight bound.
//
// Each awake endpoint is a pipeline (package pipeline) whose source is a Tap
// of the Hub: checkpoints, retries, dead letters and fencing are the
// pipeline's. A transaction with events for one endpoint alone, whose
// pipeline's goroutine waits with nothing queued, is handed to that
// pipeline on the shared stream's goroutine (pipeline.Handoff), so no
// goroutine is woken for it; only if the pipeline takes it without waiting
// (room in its in-flight limits, no fence to ask, no read-back or resume
// under way): otherwise it is queued as any other, and the shared stream
// never waits inside an endpoint's pipeline
// (TestAnEndpointAloneInATransactionIsHandedItOnTheStreamsGoroutine).
// The streams are pipeline.Sources the caller opens (HubConfig.Open): the
// gateway does not import the binlog reader, and compares positions with
// package position.
//
// The gateway engine is a library under the sink kinds: it builds on the
// sink contract and the pipeline and names no kind; the webhook kind builds
// on it (sink.Kind.FanOut, read by FanOutOf). Running it past one machine
// is a feature above the kinds, in gateway/kafkasource and gateway/scaled
// (docs/architecture.md, checked by its test).
//
// Concurrency: a Gateway's endpoints live as long as its Run. Start, StopLocked,
// Enable and the other methods may be called from any goroutine while Run
// runs (the …Locked ones under the hub's lock, as from Run's changed
// function); when Run's context ends, every endpoint's pipeline is cancelled
// with that context's cause, and Run returns once they all have.
//
// Metrics: NewMetrics registers the gateway's figures on a relay's metrics
// (package metrics): per webhook sink (Metrics.Sink) its endpoints summed
// on the sink's series, a count of endpoints per state and the
// TopLaggingEndpoints lag series, the oldest held cursor's age, the
// endpoints awake and the shared stream's waits at MaxAwake (its hubs
// report them to an Observer that is an AwakeObserver), every
// endpoint's figures on /endpoints (with the cursor of one that does not run;
// by sink and state, whole or a page at a time with limit and iterator, as
// package paging pages the console's lists), and the endpoints stopped for
// good on /readyz.
package gateway
