package router

import "strings"

// fairQueue holds queued jobs in fair order: round robin over root
// namespaces, round robin over projects within a namespace, FIFO within a
// project. A new namespace joins the end of the round, so a burst of one
// project delays another project's first job by at most one hand-out per
// other namespace (one job slot when two projects compete).
//
// fairQueue is not safe for concurrent use; the router guards it.
type fairQueue struct {
	nss  []*nsQueue
	byNS map[string]*nsQueue
	next int // index in nss of the namespace served next
	n    int
}

type nsQueue struct {
	name     string
	projects []*projQueue
	byProj   map[string]*projQueue
	next     int
}

type projQueue struct {
	name string
	jobs []*job
}

func newFairQueue() *fairQueue { return &fairQueue{byNS: map[string]*nsQueue{}} }

// Len returns the number of queued jobs.
func (q *fairQueue) Len() int { return q.n }

// namespaceOf returns the root namespace of a project full path.
func namespaceOf(project string) string {
	ns, _, _ := strings.Cut(project, "/")
	return ns
}

func (q *fairQueue) proj(j *job) *projQueue {
	ns, ok := q.byNS[j.namespace]
	if !ok {
		ns = &nsQueue{name: j.namespace, byProj: map[string]*projQueue{}}
		q.byNS[j.namespace] = ns
		q.nss = append(q.nss, ns)
	}
	p, ok := ns.byProj[j.project]
	if !ok {
		p = &projQueue{name: j.project}
		ns.byProj[j.project] = p
		ns.projects = append(ns.projects, p)
	}
	return p
}

// Push appends j to its project's queue.
func (q *fairQueue) Push(j *job) {
	p := q.proj(j)
	p.jobs = append(p.jobs, j)
	q.n++
}

// PushFront puts j first in its project's queue: a declined or expired job
// keeps its place.
func (q *fairQueue) PushFront(j *job) {
	p := q.proj(j)
	p.jobs = append([]*job{j}, p.jobs...)
	q.n++
}

// Pop removes and returns the first job in fair order for which match
// returns true, or nil. Jobs that do not match keep their place.
func (q *fairQueue) Pop(match func(*job) bool) *job {
	for i := range q.nss {
		ni := (q.next + i) % len(q.nss)
		ns := q.nss[ni]
		for k := range ns.projects {
			pi := (ns.next + k) % len(ns.projects)
			p := ns.projects[pi]
			for ji, j := range p.jobs {
				if !match(j) {
					continue
				}
				p.jobs = append(p.jobs[:ji], p.jobs[ji+1:]...)
				q.n--
				q.advance(ni, pi)
				return j
			}
		}
	}
	return nil
}

// advance moves the round-robin cursors past namespace ni and its project
// pi, dropping them when empty.
func (q *fairQueue) advance(ni, pi int) {
	ns := q.nss[ni]
	p := ns.projects[pi]
	if len(p.jobs) == 0 {
		delete(ns.byProj, p.name)
	}
	ns.projects = passTurn(ns.projects, &ns.next, pi, len(p.jobs) == 0)
	if len(ns.projects) == 0 {
		delete(q.byNS, ns.name)
	}
	q.nss = passTurn(q.nss, &q.next, ni, len(ns.projects) == 0)
}

// passTurn gives the turn of the round robin ring to the element after
// the one at i, which was just served, and drops that one when drop; it
// returns the ring.
func passTurn[T any](ring []T, next *int, i int, drop bool) []T {
	if drop {
		ring = append(ring[:i], ring[i+1:]...)
		*next = i
	} else {
		*next = i + 1
	}
	if len(ring) > 0 {
		*next %= len(ring)
	} else {
		*next = 0
	}
	return ring
}

// Remove takes j out of the queue; it reports whether j was queued.
func (q *fairQueue) Remove(j *job) bool {
	ns, ok := q.byNS[j.namespace]
	if !ok {
		return false
	}
	p, ok := ns.byProj[j.project]
	if !ok {
		return false
	}
	for i, x := range p.jobs {
		if x != j {
			continue
		}
		p.jobs = append(p.jobs[:i], p.jobs[i+1:]...)
		q.n--
		if len(p.jobs) == 0 {
			q.dropEmpty(ns, p)
		}
		return true
	}
	return false
}

// dropEmpty removes the empty project p (and ns when it empties) without
// disturbing whose turn it is.
func (q *fairQueue) dropEmpty(ns *nsQueue, p *projQueue) {
	ns.projects = dropTurn(ns.projects, &ns.next, p)
	delete(ns.byProj, p.name)
	if len(ns.projects) > 0 {
		return
	}
	q.nss = dropTurn(q.nss, &q.next, ns)
	delete(q.byNS, ns.name)
}

// dropTurn removes x from the round robin ring whose turn is next, keeping
// the turn where it is (the one after x if it was x's), and returns the
// ring.
func dropTurn[T comparable](ring []T, next *int, x T) []T {
	for i, y := range ring {
		if y == x {
			ring = append(ring[:i], ring[i+1:]...)
			if i < *next {
				*next--
			}
			break
		}
	}
	if len(ring) > 0 {
		*next %= len(ring)
	} else {
		*next = 0
	}
	return ring
}

// Each calls fn for every queued job, in no particular order.
func (q *fairQueue) Each(fn func(*job)) {
	for _, ns := range q.nss {
		for _, p := range ns.projects {
			for _, j := range p.jobs {
				fn(j)
			}
		}
	}
}
