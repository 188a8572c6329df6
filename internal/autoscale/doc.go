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
// Both stop at concurrent jobs.
//
// # Adaptive policy (drover's own)
//
// With adaptive = true the idle slot target comes from the observed load
// (Observed: arrival rate λ as an EWMA, mean job duration D, mean boot time
// B) instead of idle_count, which stays a floor; target_wait (default 30s)
// is the p95 queue wait to meet. The offered load is a = λ·D Erlangs.
//
//  1. A job that finds no free slot waits about one boot B. When B <=
//     target_wait/2 (margin for boot spread and the pool's update delay)
//     that meets the target and nothing is held ahead: 0 slots.
//  2. Otherwise the pool behaves as an M/M/c queue over the boot horizon.
//     A job waits longer than t with probability
//     P(W > t) = C(c, a) · exp(−(c − a)·t/D), C being Erlang C. The queue
//     part c_q is the least c > a with P(W > target_wait) <= 5% (ErlangC,
//     WaitTail). It is found by walking up from ⌊a⌋+1, carrying the Erlang
//     B recursion along; square-root staffing puts it at about a + β√a.
//  3. Burst term: capacity asked for when a burst starts arrives one boot
//     later, so the arrivals during one boot may exceed their mean λ·B by
//     k_b = Q95(Poisson(λ·B)) − ⌈λ·B⌉ (BurstSlots, PoissonQuantile).
//  4. Needed slots c = c_q + k_b (AdaptiveSlots); idle slot target =
//     max(c − acquired slots, idle_count), at least 1 when preemptive (a
//     preemptive pool with nothing idle would never take a job), at most
//     what max_instances can hold (AdaptiveIdleSlots, SlotIdleTarget).
//
// Without observations (λ = 0 or D = 0) the adaptive target is idle_count.
package autoscale
