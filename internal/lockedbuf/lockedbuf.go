// Package lockedbuf is a bytes buffer that several goroutines may write
// while another reads it: a command's stdout and stderr copied from their
// own goroutines, a logger's output that a test reads while the code under
// test still logs.
package lockedbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex. The zero value is empty and
// ready to use; a Buffer must not be copied after first use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer, after any Write or String in progress
// from another goroutine has returned. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
