package router

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func qjob(id int64, project string) *job {
	return &job{id: id, project: project, namespace: namespaceOf(project)}
}

func popAll(q *fairQueue) []string {
	var out []string
	for j := q.Pop(func(*job) bool { return true }); j != nil; j = q.Pop(func(*job) bool { return true }) {
		out = append(out, fmt.Sprintf("%s#%d", j.project, j.id))
	}
	return out
}

// TestFairQueueBurst: project A queues 200 jobs and one is handed out;
// then project B queues 5. B's first job must come out after at most one
// more of A's.
func TestFairQueueBurst(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"ga/a", "gb/b"}, // different namespaces
		{"g/a", "g/b"},   // same namespace, different projects
	} {
		t.Run(tc.b, func(t *testing.T) {
			q := newFairQueue()
			for i := range 200 {
				q.Push(qjob(int64(i+1), tc.a))
			}
			q.Pop(func(*job) bool { return true })
			for i := range 5 {
				q.Push(qjob(int64(1000+i), tc.b))
			}
			aBefore := 0
			for {
				j := q.Pop(func(*job) bool { return true })
				if j.project == tc.b {
					break
				}
				aBefore++
			}
			if aBefore > 1 {
				t.Errorf("%d of A's jobs were handed out before B's first, want at most 1", aBefore)
			}
			if q.Len() != 200-1-aBefore+4 {
				t.Errorf("Len = %d, want %d", q.Len(), 200-1-aBefore+4)
			}
		})
	}
}

func TestFairQueueOrder(t *testing.T) {
	q := newFairQueue()
	q.Push(qjob(1, "g/a"))
	q.Push(qjob(2, "g/a"))
	q.Push(qjob(3, "g/b"))
	q.Push(qjob(4, "h/c"))
	q.Push(qjob(5, "g/a"))
	q.Push(qjob(6, "h/c"))
	// Namespaces g, h alternate; within g, projects a and b alternate.
	want := []string{"g/a#1", "h/c#4", "g/b#3", "h/c#6", "g/a#2", "g/a#5"}
	if diff := cmp.Diff(want, popAll(q)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if q.Len() != 0 {
		t.Errorf("Len = %d after draining, want 0", q.Len())
	}
}

func TestFairQueueMatchRemovePushFront(t *testing.T) {
	q := newFairQueue()
	for i := range 4 {
		q.Push(qjob(int64(i+1), "g/a"))
	}
	q.Push(qjob(10, "g/b"))
	// Only even ids match: the non-matching head keeps its place.
	j := q.Pop(func(j *job) bool { return j.id%2 == 0 })
	if j == nil || j.id != 2 {
		t.Fatalf("Pop(even) = %v, want job 2", j)
	}
	j3 := q.Pop(func(j *job) bool { return j.id == 3 })
	if j3 == nil {
		t.Fatal("Pop(3) = nil")
	}
	q.PushFront(j3)
	if !q.Remove(j3) || q.Remove(j3) {
		t.Error("Remove: want true once, then false")
	}
	q.PushFront(j3)
	want := []string{"g/b#10", "g/a#3", "g/a#1", "g/a#4"}
	if diff := cmp.Diff(want, popAll(q)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func BenchmarkFairQueue(b *testing.B) {
	q := newFairQueue()
	for i := range 1000 {
		q.Push(qjob(int64(i), fmt.Sprintf("ns%d/p%d", i%7, i%31)))
	}
	b.ResetTimer()
	for i := range b.N {
		j := q.Pop(func(*job) bool { return true })
		j.id = int64(i)
		q.Push(j)
	}
}
