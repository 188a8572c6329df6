// Package simulate replays a job trace against the autoscaling Pool and
// its policy on a virtual clock with a simulated fleet (fleet/sim), so an
// operator can see what a configuration would cost and how long jobs would
// wait before paying for it.
//
// # Model
//
// A job arriving enters a FIFO queue. As a runner manager would, the
// queue's head asks the pool for a reservation (Reserve; ErrNoCapacity
// means the manager would not even request the job, and asks again at
// its next poll) and then for a slot (TryAcquire, counted as waiting
// while none is free; the reservation carries the job's arrival time,
// SetQueuedAt). With Options.PollInterval (a manager's check_interval)
// jobs are requested only at poll times, all queued jobs at once; without
// it at every event. A reserved job waits for its slot without a timeout
// (instance_acquire_timeout is minutes, beyond the waits of any policy
// worth simulating). Once it holds a
// slot it leaves the queue, runs for its duration and releases the slot.
// Its queue wait is the time from arrival to slot. The pool's scaling
// passes run when the real pool would run them: after every event (a
// Reserve, Acquire or Release wakes it) and on its own update intervals.
//
// # Speed
//
// The simulation is event driven: the clock jumps to the next arrival,
// job end or scaling pass, never tick by tick, so a 50,000-job day runs in
// a few seconds (BenchmarkSimulateDay50k).
package simulate
