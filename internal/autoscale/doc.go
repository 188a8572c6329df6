// Package autoscale is drover's autoscaling policy: a pure function from
// the pool's instances, the demand for job slots, the configuration and the
// time to what to create and what to remove, with a reason for each
// decision. The pool (pool*.go) carries the decisions out; the simulator
// replays job traces against the same code on a virtual clock.
//
// # Dialects
//
// Both of GitLab Runner's configurations map onto one Policy (FromRunner):
//
//   - [runners.machine] (docker+machine): capacity in machines, one job
//     each. IdleCount, IdleCountMin, IdleScaleFactor (a float), IdleTime
//     (seconds), MaxGrowthRate, MaxBuilds, the runner's limit as the cap on
//     machines in every state, and [[runners.machine.autoscaling]] periods
//     in 7-field gorhill/cronexpr syntax ("sec min hour dom month dow
//     year"), in force when the next match is within ±1 s of now — so the
//     last second of a period's last minute is outside it (GitLab Runner
//     issue 2170), the second before its first one inside.
//   - [runners.autoscaler] (taskscaler): capacity in job slots,
//     capacity_per_instance per instance; max_use_count, max_instances and
//     [[runners.autoscaler.policy]] entries with 5-field unix cron periods
//     (default "* * * * *"), timezone, idle_count (slots), idle_time,
//     scale_factor, scale_factor_limit, preemptive_mode (unset: idle_count
//     > 0), and drover's adaptive = true / target_wait.
//
// The last entry whose periods cover now wins; without one the top-level
// values apply (for the autoscaler dialect: idle_count 0, not preemptive).
//
// # Machine dialect (GitLab Runner's docker+machine algorithm)
//
// Available = idle + creating machines − jobs waiting for a machine;
// in use = busy machines + waiting jobs. The idle target is IdleCount, or
// with IdleScaleFactor > 0, floor(in use × IdleScaleFactor) clamped to
// [max(1, IdleCountMin), IdleCount] (MachineIdleTarget); the target is
// "exceeded" when available >= target. Idle machines are walked in list
// order with running counts and removed for, in this order: MaxBuilds
// reached; the machines before it already reach limit; idle longer than
// IdleTime (since the end of its last job, else since ready/created) while
// the machines counted so far already meet the target — so the first
// machines survive and later ones are trimmed. Unlike GitLab Runner the
// target itself is computed from the whole list, so that a busy machine
// late in the list does not make earlier idle ones look superfluous.
// Machines are then created, one per waiting job no idle or booting
// machine will serve (on-demand; the only creations when IdleCount = 0),
// then up to the idle target; never beyond limit (all states) nor with
// more than MaxGrowthRate creating. Job requests in flight (Reserved)
// create nothing: GitLab Runner creates on-demand machines only once a job
// has arrived.
//
// # Autoscaler dialect (taskscaler)
//
// The idle slot target is idle_count, raised to ceil(scale_factor ×
// acquired slots) capped by scale_factor_limit (when > 0) if scale_factor
// > 0, and never more than max_instances can hold (SlotIdleTarget). Free
// slots wanted = reserved + waiting + idle target. Busy and booting
// instances keep their free slots; idle instances are walked in list order
// and removed when: max_use_count is used up (retirement happens once the
// instance is idle after its last job); the instances before it already
// reach max_instances; idle longer than idle_time while the free slots
// counted so far already cover what is wanted. Missing free slots are
// created as ceil(missing / capacity_per_instance) instances (an instance
// offers no more slots than max_use_count), within max_instances (every
// state) and MaxGrowthRate. An instance's free slots never exceed its
// remaining uses.
//
// # Reservations
//
// CanReserve decides whether a job may be requested. Preemptive (machine
// dialect with IdleCount > 0, autoscaler dialect per preemptive_mode):
// only while reserved + waiting jobs are fewer than the free slots on ready
// instances — with reservation throttling (autoscaler, default on) fewer
// than those free slots minus capacity_per_instance, but one at least.
// Otherwise: while max_instances × capacity_per_instance can hold one more
// job (machine dialect: limit machines, counting busy and removing ones).
// Both stop at JobCap jobs: the global concurrent and the runner's limit,
// as the manager does. In the autoscaler dialect a JobCap below
// max_instances × capacity_per_instance keeps the pool from ever filling,
// which FromRunner reports as a warning (CapWarning). The keys are
// described for users in docs/autoscaler.md.
//
// # Adaptive policy (drover's own)
//
// With adaptive = true (autoscaler dialect) three things change.
//
// Reservations. preemptive_mode defaults to off for an adaptive entry
// (idle_count notwithstanding; an explicit preemptive_mode = true is
// honoured): the manager takes a job whenever max_instances could hold
// it, and a job without a free slot waits in Acquire as Waiting demand,
// for which Decide creates an instance at once. The idle buffer is then
// for latency only; in preemptive mode jobs beyond the buffer would stay
// queued at the coordinator, invisible to the pool, and only the buffer's
// refill would be created.
//
// Idle target. It comes from the observed load (Observed: arrival rate λ,
// an EWMA of job arrivals with a 10 min time constant, an arrival being
// the first acquire of a job's reservation, so demand rather than
// throughput; mean job duration D and mean boot time B, EWMAs of weight
// 0.1; the index of dispersion I of arrivals, Var/E of the arrivals per
// 10 s bucket, EWMA over about 10 min, at least 1; the feedback gain g,
// below) instead of idle_count, which stays a floor; target_wait (default
// 30s) is the p95 queue wait to meet. The offered load is a = λ·D
// Erlangs.
//
//  1. Exposure. A job that finds no free slot is served by capacity asked
//     for about one boot earlier, and may itself wait target_wait; half of
//     the target is kept as margin for boot-time spread and the pool's
//     update delay, so the idle buffer must bridge W = B − target_wait/2.
//     W <= 0: boots alone meet the target, the buffer is 0.
//  2. Load change over W. Each running job still runs after W with
//     probability e^(−W/D), p = 1 − e^(−W/D); the jobs that arrive and
//     still run number a·p on average, with variance a·p·I (compound
//     Poisson: pipelines fan out in batches of K, I ≈ E[K²]/E[K]; I = 1
//     for Poisson arrivals). The change X has mean 0 and variance
//     σ² = a·p·(2 − p) + v_b, v_b the bursts' part a·p·(I − 1) counted as
//     30·(a·p·(I − 1)/30)^0.4 (burstVariance): square-root staffing for
//     Poisson arrivals, the buffer growing like √a; a pipeline's fan-out
//     keeps its size when the load falls, so the part that catches
//     bursts grows only as the fifth root of theirs.
//  3. Feedback. σ is multiplied by the gain g. The pool feeds every job's
//     queue wait while an adaptive schedule is in force: from
//     Reservation.SetQueuedAt when the caller knows when the job was
//     queued (the simulator), else from its first acquire minus the wait
//     at the coordinator the job payload reports (job_info.
//     time_in_queue_seconds, which the instance and docker-autoscaler
//     executors pass on through Lease.SetTimeInQueue and
//     Reservation.SetTimeInQueue), so that a job that waited at the
//     coordinator counts that wait too. ln g += 0.005·(miss − goal_j),
//     miss = 1 when the wait exceeded target_wait, g within [1/32, 32].
//     goal_j is the day's goal, 4.2% (4.5% at boots of three times the
//     target and longer, feedbackGoalFor), times the job's miss shape
//     σ/(λ·W) over its mean of about the last day (missShape, within
//     [¼, 4]×, phased in over a fresh pool's first day): a buffer of
//     a fixed z·σ, the cheapest allocation (4. below), lets more of a low
//     load's jobs miss than of a high one's, and the loop must not undo
//     it. Over a day 4.2% of the jobs miss the target (0.8 points inside
//     the p95, as margin for the loop's lag), whatever the bias of the
//     model on the load at hand. The step is small on purpose: misses come in
//     clusters (a pipeline's fan-out finding the buffer short), and a
//     loop that follows them makes the buffer swing, which costs more
//     idle time than a steady buffer for the same share of late jobs
//     (with 0.015, as before, the gain moved between 0.4 and 1.7 within
//     a day). A slow loop learns over days rather than hours; the state
//     file keeps what it learnt (and the load statistics) across
//     restarts, so a manager starts the day from yesterday's gain. 4.2%
//     rather than 4.5%: at 30 s boots the waits of jobs served by a boot
//     gather just above 30 s, and 4.5% put two tuning days at a p95 of
//     30.0–30.2 s.
//  4. Buffer (AdaptiveIdleSlots): k = ⌊z·σ·g⌋ with z = 2. A buffer in
//     proportion to σ at every load minimises the idle time for a given
//     share of late jobs over a day (each slot then saves the same misses
//     per second at peak and at night; the rule before issue 19 allowed a
//     constant share of misses at every load, which keeps more buffer at
//     low load than it is worth). The floor is the discrete form (keep
//     slot j while P(X ≥ j) is above the level); z is where the loop
//     settled on the tuning days at 2 min boots (g about 1; at 30 s boots
//     it settles lower). z = 3 before, with a faster loop, started a
//     fresh pool on the safe side but kept it there for hours.
//     AdaptiveSlots = ⌈a⌉ + k.
//     The measured statistics are smoothed for this: the mean duration
//     over about the last 100 jobs, the index of dispersion over an hour.
//  5. Idle target = max(k, idle_count), at least 1 when preemptive (a
//     preemptive pool with nothing idle would never take a job), at most
//     what max_instances can hold (SlotIdleTarget). Booting slots count as
//     free, as for any idle target.
//
// Removal (AdaptiveIdleTime). An idle instance that neither the demand
// (reserved + waiting) nor the idle target needs is removed once it has
// been idle for min(idle_time, B/2, target_wait/3) rather than idle_time
// (without an observed boot time, idle_time): 10 s for the default
// target. The buffer covers the arrivals expected before a new instance
// could boot; an instance beyond it is one a finishing job freed, and
// holding it longer buys fewer late jobs per idle second than a larger
// buffer does. Against half a boot time (the rule before) it cut idle
// time on the tuning days by up to a fifth at 30 s boots (idle plus
// booting even) and up to a third at 2 min boots, where it doubled the
// booting time and raised idle plus booting by up to a fifth: freed
// instances no longer absorb as many arrivals, so more are booted
// (docs/BENCHMARKS.md reports both). idle_time remains an
// upper bound; instances the target needs stay whatever their idle time.
//
// Memory. The load statistics (rate, durations, boot time, dispersion),
// the gain and the miss shapes' mean are saved in the pool's state file with its instances and
// taken over by the next manager on the same state file (older files
// without them: learning starts anew).
//
// Measured (BenchmarkAdaptiveVsBestStatic, `drover autoscale sweep
// --warm-up`): docs/BENCHMARKS.md has the table per day shape (steady,
// diurnal, bursty, weekend) × boot time (30 s, 2 min) against the best
// static configuration of the full grid an operator can tune (idle_count
// 0–32 × idle_time 30 s–20 min × preemptive_mode), on days the constants
// above were not tuned on, each after the day before.
//
// Bounds for comparison: BurstSlots (Poisson 95% quantile of arrivals over
// W, minus the mean, ignoring slots freed by finishing jobs) bounds the
// Poisson buffer from above; ErlangSlots is the fixed-pool answer — the
// least c with P(wait > target) = C(c, a)·e^(−(c−a)·target/D) <= 5% in an
// M/M/c queue (ErlangC, WaitTail), ≈ a + β√a. Sized that way (c − busy
// idle slots, or that plus the burst term) an elastic pool kept 15-40
// times the idle capacity the target needs in simulation, since waiting
// jobs make it boot capacity and finishing jobs free slots within the
// wait; so the Erlang-C formula is not what Decide uses.
//
// Without observations (λ = 0 or D = 0) the adaptive target is idle_count.
package autoscale
