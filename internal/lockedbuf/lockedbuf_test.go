package lockedbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: writes from many goroutines, while another reads,
// all land whole; run it with -race.
func TestConcurrentWrites(t *testing.T) {
	const writers, writes = 16, 200
	const line = "0123456789\n"
	var b Buffer
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
				_ = b.String()
			}
		}
	}()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range writes {
				if n, err := b.Write([]byte(line)); n != len(line) || err != nil {
					t.Errorf("Write = %d, %v; want %d, nil", n, err, len(line))
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-read

	got := b.String()
	if want := writers * writes * len(line); len(got) != want {
		t.Fatalf("%d bytes written, want %d", len(got), want)
	}
	if n := strings.Count(got, line); n != writers*writes {
		t.Fatalf("%d whole lines, want %d", n, writers*writes)
	}
}

func TestZeroValue(t *testing.T) {
	var b Buffer
	if got := b.String(); got != "" {
		t.Fatalf("String() of a zero Buffer = %q, want empty", got)
	}
}
