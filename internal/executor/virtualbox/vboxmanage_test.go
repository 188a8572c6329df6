package virtualbox

import (
	"errors"
	"os/exec"
	"slices"
	"testing"

	"github.com/drover-ci/drover/internal/executor/vm"
)

// TestParseOutput: VBoxManage's output as VirtualBox prints it (LF and
// CRLF line ends) read as GitLab Runner's helpers/virtualbox reads it.
func TestParseOutput(t *testing.T) {
	machine := "name=\"debian-runner-abc-concurrent-0\"\nUUID=\"f4b4a4b0-0000-4000-8000-000000000001\"\nVMState=\"saved\"\nVMStateChangeTime=\"2024-05-01T10:00:00.000000000\"\nForwarding(0)=\"guestssh,tcp,127.0.0.1,40022,,22\"\n"
	human := "Name:                        debian\nState:                       powered off (since 2024-05-01)\nNIC 1:                       MAC: 0800271A2B3C, Attachment: NAT, Cable connected: on\n" +
		"NIC 1 Rule(0):   name = http, protocol = tcp, host ip = , host port = 8080, guest ip = , guest port = 80\n" +
		"NIC 1 Rule(1):   name = guestssh, protocol = tcp, host ip = 127.0.0.1, host port = 40022, guest ip = , guest port = 22\n"
	snaps := "SnapshotName=\"Base State\"\r\nSnapshotUUID=\"1111\"\r\nSnapshotName-1=\"Started\"\r\nSnapshotUUID-1=\"2222\"\r\nCurrentSnapshotName=\"Started\"\r\nCurrentSnapshotUUID=\"2222\"\r\nCurrentSnapshotNode=\"SnapshotName-1\"\r\n"
	list := "\"debian\" {f4b4a4b0-0000-4000-8000-000000000001}\n\"debian-runner-abc-concurrent-0\" {f4b4a4b0-0000-4000-8000-000000000002}\n\"<inaccessible>\" {f4b4a4b0-0000-4000-8000-000000000003}\n"

	if s, ok := parseStatus(machine); !ok || s != Saved || s.Online() {
		t.Errorf("parseStatus = %q, %v; want saved, not online", s, ok)
	}
	if _, ok := parseStatus("name=\"x\"\n"); ok {
		t.Errorf("parseStatus without VMState: ok")
	}
	for _, tc := range []struct {
		s      Status
		online bool
	}{{Running, true}, {"starting", true}, {"paused", true}, {"snapshotting", true}, {PoweredOff, false}, {Aborted, false}, {Saved, false}} {
		if got := tc.s.Online(); got != tc.online {
			t.Errorf("Status(%q).Online() = %v, want %v", tc.s, got, tc.online)
		}
	}
	if p, ok := parseSSHPort(human); !ok || p != 40022 {
		t.Errorf("parseSSHPort = %d, %v; want 40022 (the guestssh rule, not http's)", p, ok)
	}
	if _, ok := parseSSHPort("NIC 1:  disabled\n"); ok {
		t.Errorf("parseSSHPort without a rule: ok")
	}
	if got := parseHostPorts(human + "\n" + human); !slices.Equal(got, []string{"8080", "40022", "8080", "40022"}) {
		t.Errorf("parseHostPorts = %q", got)
	}
	if cur, ok := parseCurrentSnapshot(snaps); !ok || cur != "Started" {
		t.Errorf("parseCurrentSnapshot = %q, %v; want Started", cur, ok)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{{"Base State", true}, {"Started", true}, {"2222", true}, {"Base", false}, {"Start.d", false}} {
		if got := listsSnapshot(snaps, tc.name); got != tc.want {
			t.Errorf("listsSnapshot(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := parseList(list); !slices.Equal(got, []string{"debian", "debian-runner-abc-concurrent-0", "<inaccessible>"}) {
		t.Errorf("parseList = %q", got)
	}
}

// TestNotFound: VBoxManage's answer for an unknown VM is told apart from
// other failures.
func TestNotFound(t *testing.T) {
	unknown := &vm.ProgramError{Program: "VBoxManage", Args: []string{"showvminfo", "x"}, Err: &exec.ExitError{}, Stderr: "VBoxManage: error: Could not find a registered machine named 'x'\nVBoxManage: error: Details: code VBOX_E_OBJECT_NOT_FOUND (0x80bb0001), component VirtualBoxWrap, interface IVirtualBox, callee nsISupports"}
	other := &vm.ProgramError{Program: "VBoxManage", Args: []string{"showvminfo", "x"}, Err: &exec.ExitError{}, Stderr: "VBoxManage: error: The object functionality is limited"}
	if !notFound(unknown) || notFound(other) || notFound(errors.New("exec: not found")) {
		t.Errorf("notFound = %v, %v; want true for VBOX_E_OBJECT_NOT_FOUND only", notFound(unknown), notFound(other))
	}
	if got := unknown.Error(); got != "VBoxManage showvminfo x: "+unknown.Stderr {
		t.Errorf("Error() = %q", got)
	}
}
