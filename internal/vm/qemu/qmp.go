package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrMonitorClosed is returned (wrapped) by Monitor calls once the QMP
// connection has ended, typically because QEMU exited.
var ErrMonitorClosed = errors.New("qmp: connection closed")

// Monitor is a QMP connection: QEMU's JSON control protocol on a unix
// socket. Commands run one at a time, in order; asynchronous events go to
// Events. Safe for concurrent use.
type Monitor struct {
	conn net.Conn

	cmdMu   sync.Mutex // one command in flight
	mu      sync.Mutex
	nextID  int
	waiting map[string]chan qmpReply

	events chan Event
	done   chan struct{}
	err    error // why the connection ended; set before done closes
}

// Event is an asynchronous QMP event ("STOP", "RESUME", "SHUTDOWN", ...).
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
}

// QMPError is an error answer to a command.
type QMPError struct {
	Command string
	Class   string `json:"class"`
	Desc    string `json:"desc"`
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qmp %s: %s (%s)", e.Command, e.Desc, e.Class)
}

type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *QMPError       `json:"error"`
	ID     json.RawMessage `json:"id"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	QMP    json.RawMessage `json:"QMP"`
}

// maxSunPath is the longest path a unix socket address may have (108
// bytes with the terminating NUL on Linux).
const maxSunPath = 107

// DialMonitor connects to the QMP socket at path and negotiates
// capabilities (the greeting, then qmp_capabilities). ctx bounds the
// connect and the handshake only.
func DialMonitor(ctx context.Context, path string) (*Monitor, error) {
	conn, err := dialUnix(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	m := &Monitor{conn: conn, waiting: map[string]chan qmpReply{}, events: make(chan Event, 64), done: make(chan struct{})}
	greeting := make(chan error, 1)
	go m.read(greeting)
	select {
	case err := <-greeting:
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("qmp %s: greeting: %w", path, err)
		}
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("qmp %s: greeting: %w", path, ctx.Err())
	}
	if err := m.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	return m, nil
}

// dialUnix connects to a unix socket, also one whose path is longer than
// a socket address holds: through /proc/self/fd of its directory.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxSunPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, base := path[:strings.LastIndexByte(path, '/')+1], path[strings.LastIndexByte(path, '/')+1:]
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd)+"/"+base)
}

// read dispatches the connection's messages until it ends. The first one
// must be the greeting.
func (m *Monitor) read(greeting chan<- error) {
	sc := bufio.NewScanner(m.conn)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	first := true
	var err error
	for sc.Scan() {
		var r qmpReply
		if jerr := json.Unmarshal(sc.Bytes(), &r); jerr != nil {
			err = fmt.Errorf("bad message %.200q: %w", sc.Bytes(), jerr)
			break
		}
		if first {
			first = false
			if r.QMP == nil {
				err = fmt.Errorf("no greeting but %.200q", sc.Bytes())
				break
			}
			greeting <- nil
			continue
		}
		if r.Event != "" {
			select {
			case m.events <- Event{Name: r.Event, Data: r.Data}:
			default: // nobody listens: events are a hint, not a log
			}
			continue
		}
		m.mu.Lock()
		ch := m.waiting[string(r.ID)]
		delete(m.waiting, string(r.ID))
		m.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if err == nil {
		err = sc.Err()
	}
	if err == nil {
		err = ErrMonitorClosed
	} else {
		err = fmt.Errorf("%w: %w", ErrMonitorClosed, err)
	}
	if first {
		greeting <- err
	}
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
	close(m.done)
	m.conn.Close()
}

// Execute runs the QMP command cmd with args (nil: none) and decodes its
// return value into result (nil: ignored). An error answer is a
// *QMPError; a connection that ends first is ErrMonitorClosed.
func (m *Monitor) Execute(ctx context.Context, cmd string, args any, result any) error {
	m.cmdMu.Lock()
	defer m.cmdMu.Unlock()
	m.mu.Lock()
	m.nextID++
	id := strconv.Itoa(m.nextID)
	ch := make(chan qmpReply, 1)
	m.waiting[`"`+id+`"`] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiting, `"`+id+`"`)
		m.mu.Unlock()
	}()

	msg := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	if _, err := m.conn.Write(append(b, '\n')); err != nil {
		select {
		case <-m.done:
			return fmt.Errorf("qmp %s: %w", cmd, m.Err())
		default:
		}
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			r.Error.Command = cmd
			return r.Error
		}
		if result != nil {
			if err := json.Unmarshal(r.Return, result); err != nil {
				return fmt.Errorf("qmp %s: answer %.200q: %w", cmd, r.Return, err)
			}
		}
		return nil
	case <-m.done:
		return fmt.Errorf("qmp %s: %w", cmd, m.Err())
	case <-ctx.Done():
		// The answer may still come; the connection stays usable, as the
		// next command has an id of its own.
		return fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
	}
}

// Events delivers QEMU's asynchronous events while someone receives; those
// that find the buffer full are dropped.
func (m *Monitor) Events() <-chan Event { return m.events }

// Done is closed when the connection ends (QEMU quit or was killed).
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Err is why the connection ended, nil while it is open.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Close closes the connection; QEMU keeps running.
func (m *Monitor) Close() error { return m.conn.Close() }

// Status is the answer of query-status.
type Status struct {
	Running bool `json:"running"`
	// Status is QEMU's run state: "running", "paused", "prelaunch",
	// "inmigrate", "restore-vm", "save-vm", "shutdown", ...
	Status string `json:"status"`
}

// QueryStatus returns the VM's run state.
func (m *Monitor) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := m.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// HumanCommand runs a human monitor (HMP) command line and returns its
// output. HMP reports failures in its output only: a line starting with
// "Error:" is returned as an error.
func (m *Monitor) HumanCommand(ctx context.Context, line string) (string, error) {
	var out string
	if err := m.Execute(ctx, "human-monitor-command", map[string]any{"command-line": line}, &out); err != nil {
		return "", err
	}
	for l := range strings.Lines(out) {
		if msg, ok := strings.CutPrefix(l, "Error: "); ok {
			return out, fmt.Errorf("%s: %s", line, strings.TrimSpace(msg))
		}
	}
	return out, nil
}

// Stop pauses the guest's CPUs.
func (m *Monitor) Stop(ctx context.Context) error { return m.Execute(ctx, "stop", nil, nil) }

// Cont resumes the guest's CPUs.
func (m *Monitor) Cont(ctx context.Context) error { return m.Execute(ctx, "cont", nil, nil) }

// SystemPowerdown presses the guest's power button (ACPI): the guest
// decides whether and when to power off.
func (m *Monitor) SystemPowerdown(ctx context.Context) error {
	return m.Execute(ctx, "system_powerdown", nil, nil)
}

// Quit ends QEMU at once (the guest is not asked). The connection ends
// with it.
func (m *Monitor) Quit(ctx context.Context) error {
	err := m.Execute(ctx, "quit", nil, nil)
	if errors.Is(err, ErrMonitorClosed) {
		// QEMU may close the socket before its answer is read.
		return nil
	}
	return err
}
