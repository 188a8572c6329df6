package docker

import (
	"testing"
)

func TestSandboxable(t *testing.T) {
	on := func(f func(*Config)) *Config {
		c := &Config{NetworkSandbox: true}
		if f != nil {
			f(c)
		}
		return c
	}
	cases := []struct {
		name string
		cfg  *Config
		want bool
	}{
		{"defaults", on(nil), true},
		{"network_sandbox = false", &Config{}, false},
		{"privileged", on(func(c *Config) { c.Privileged = true }), false},
		{"links", on(func(c *Config) { c.Links = []string{"db:db"} }), false},
		{"mac_address", on(func(c *Config) { c.MacAddress = "92:d0:c6:0a:29:33" }), false},
		{"cap_add NET_ADMIN", on(func(c *Config) { c.CapAdd = []string{"NET_ADMIN"} }), false},
		{"cap_add cap_net_admin", on(func(c *Config) { c.CapAdd = []string{"cap_net_admin"} }), false},
		{"cap_add ALL", on(func(c *Config) { c.CapAdd = []string{"ALL"} }), false},
		{"cap_add SYS_PTRACE", on(func(c *Config) { c.CapAdd = []string{"SYS_PTRACE"} }), true},
		{"sysctls net.*", on(func(c *Config) { c.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"} }), false},
		{"sysctls kernel.*", on(func(c *Config) { c.Sysctls = map[string]string{"kernel.msgmax": "65536"} }), true},
		{"dns, dns_search, extra_hosts: the sandbox's", on(func(c *Config) {
			c.DNS, c.DNSSearch, c.ExtraHosts = []string{"1.1.1.1"}, []string{"example.com"}, []string{"db:10.0.0.5"}
		}), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandboxable(tc.cfg); got != tc.want {
				t.Errorf("sandboxable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSandboxSpec: a sandbox is made anew when what it holds for its
// jobs changes (the host name names the project; dns and extra_hosts are
// the namespace's).
func TestSandboxSpec(t *testing.T) {
	base := sandboxSpec("runner-a-project-1-concurrent-0", "drover-helper:1", &Config{})
	for name, spec := range map[string]string{
		"host name":   sandboxSpec("runner-a-project-2-concurrent-0", "drover-helper:1", &Config{}),
		"image":       sandboxSpec("runner-a-project-1-concurrent-0", "drover-helper:2", &Config{}),
		"dns":         sandboxSpec("runner-a-project-1-concurrent-0", "drover-helper:1", &Config{DNS: []string{"1.1.1.1"}}),
		"dns_search":  sandboxSpec("runner-a-project-1-concurrent-0", "drover-helper:1", &Config{DNSSearch: []string{"example.com"}}),
		"extra_hosts": sandboxSpec("runner-a-project-1-concurrent-0", "drover-helper:1", &Config{ExtraHosts: []string{"db:10.0.0.5"}}),
	} {
		if spec == base {
			t.Errorf("%s: the same spec %s", name, spec)
		}
	}
	if again := sandboxSpec("runner-a-project-1-concurrent-0", "drover-helper:1", &Config{Memory: 1 << 30}); again != base {
		t.Errorf("a setting of the job's containers changed the sandbox's spec: %s, want %s", again, base)
	}
}

func TestRestoreScript(t *testing.T) {
	want := "cat /tmp/drover-sandbox/hosts > /etc/hosts && cat /tmp/drover-sandbox/resolv.conf > /etc/resolv.conf && cat /tmp/drover-sandbox/hostname > /etc/hostname"
	if got := restoreScript(); got != want {
		t.Errorf("restoreScript() = %q, want %q", got, want)
	}
}

// TestSandboxWantAgain: a sandbox of another project's is replaced for
// the second job in a row of a project on its network, never for jobs of
// several projects in turn.
func TestSandboxWantAgain(t *testing.T) {
	cases := []struct {
		name  string
		specs string // one job's settings per letter, on network 0
		want  string // r: the job's settings were wanted by the last job too
	}{
		{"one project", "aaaa", ".rrr"},
		{"two in turn", "abab", "...."},
		{"moving on", "aabb", ".r.r"},
		{"three in turn, then one", "abcaa", "....r"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sn slotNets
			got := ""
			for _, c := range tc.specs {
				if sn.wantAgain(0, string(c)) {
					got += "r"
				} else {
					got += "."
				}
			}
			if got != tc.want {
				t.Errorf("%s: %s, want %s", tc.specs, got, tc.want)
			}
			if sn.want[1] != "" {
				t.Errorf("network 1's record changed: %q", sn.want[1])
			}
		})
	}
}
