// Package hcloudtest is a stand-in of the Hetzner Cloud API for tests: an
// HTTP server on loopback that answers the calls Hetzner's fleeting plugin
// (github.com/hetznercloud/fleeting-plugin-hetzner, run unchanged) makes,
// because the real API cannot be reached from a test. The API is the only
// fake part: every server it creates is a real machine, booted through
// Machines (DockerMachines: a container running sshd), whose address the
// plugin's ConnectInfo reports and which a test reaches over real SSH.
//
// # Endpoints
//
// Under the endpoint URL (Server.URL, ".../v1"), with the same JSON shapes,
// status codes and error body ({"error":{"code":...,"message":...}}) as
// the real API, and meta.pagination on every list (page, per_page up to
// 50, next_page null on the last page):
//
//	GET    /locations, /locations/{id}         ?name
//	GET    /server_types, /server_types/{id}   ?name
//	GET    /images, /images/{id}               ?name ?architecture ?include_deprecated ?type ?status ?label_selector
//	GET    /ssh_keys, /ssh_keys/{id}           ?name ?fingerprint ?label_selector
//	POST   /ssh_keys
//	DELETE /ssh_keys/{id}
//	GET    /servers, /servers/{id}             ?name ?label_selector ?status
//	POST   /servers
//	DELETE /servers/{id}
//	GET    /actions, /actions/{id}             ?id (repeated) ?status
//	GET    /volumes                            ?name ?label_selector ?status (always empty)
//
// Lists also take page, per_page and sort (sort is accepted and ignored).
// That is what the plugin calls with its default configuration: Init reads
// the location, the server types and the image, uploads the connector's
// public key (POST /ssh_keys, after looking it up by fingerprint and by
// name) and lists volumes; Increase creates servers and polls their
// actions; Update lists servers by label_selector instance-group=<name>;
// ConnectInfo gets one server; Decrease lists volumes, deletes servers and
// polls the delete actions; Shutdown deletes the key; Heartbeat calls
// nothing. Anything else (volumes, networks, primary IPs, firewalls, an
// unknown query parameter or request field) is refused with a
// Hetzner-shaped error and recorded: Unexpected lists it, so a test sees
// that the plugin did something the stand-in does not model.
//
// The catalogue is fixed: locations fsn1, nbg1, hel1; server types cpx22,
// cpx42, cx23 (x86) and cax11, cax21 (arm); images debian-12, debian-13,
// ubuntu-24.04, each for both architectures.
//
// # Servers
//
// POST /servers answers at once with the server in status initializing,
// a create_server action and a start_server next action, both running.
// The machine is started in the background (at most four machine
// operations at a time), with the public keys of the request's ssh_keys;
// when it is up the server is running, public_net.ipv4.ip is the
// machine's address and both actions succeed. A machine that fails to
// start leaves the server off and the actions in error. DELETE
// /servers/{id} answers with a running delete_server action and the
// server in status deleting; once the machine is stopped the server is
// gone and the action succeeds. IPv6 is never assigned (public_net.ipv6
// is null): the machines have none. user_data is kept (ServerInfo) but
// not run.
//
// # Machines
//
// DockerMachines runs each server as a container of drover's sshd test
// image on the local engine's default bridge. DockerMachinesWith takes
// another image, or (Engine) runs each server with a Docker engine of its
// own, the way the docker fleet provider runs its engine instances (the
// image docker.DefaultDindImage, every capability but CAP_SYS_RESOURCE
// instead of --privileged, the host's cgroup tree, /var/lib/docker as an
// anonymous volume; the cgroups the inner engine made are removed with
// the machine), so that servers of the plugin can take docker-autoscaler
// jobs; EngineArgs adds dockerd flags such as --insecure-registry.
//
// # Faults and observation
//
// SetFault, SetFailing and ClearFailing switch error answers on and off
// (no timers: the test decides when an outage starts and ends). Calls,
// Count and Unexpected report the calls made, Servers and Deleted the
// servers, and Wait blocks until a condition on them holds, re-checking
// it after every call and every server change. Every call must carry
// "Authorization: Bearer <token>" with the token given to New; others
// get 401 unauthorized, as from Hetzner.
//
// # Running the plugin against it
//
// BuildPlugin builds the plugin from its source (cached), PluginConfig
// gives the plugin_config the stand-in accepts (name, token, endpoint,
// location, server_type, image). The connector_config needs nothing
// special: with use_static_credentials and a key, the plugin uploads the
// key's public half; without, the plugin makes a key itself and returns
// it from ConnectInfo. The plugin's username defaults to root; the
// machines DockerMachines starts authorise the keys for root and for the
// image's unprivileged user (docker.ImageUser, "drover"), so either works.
//
// The plugin reads HCLOUD_TOKEN and HCLOUD_ENDPOINT (and their _FILE
// forms) from its environment, which it inherits from the test, and they
// win over plugin_config: a test binary that must not reach the real API
// unsets them, as this package's TestMain does.
//
// # The plugin, as seen through the stand-in
//
// Facts about the unchanged plugin that tests built on this package meet:
//
//   - Increase and Decrease return only when the servers are created or
//     deleted: the plugin waits for each server's actions in turn, polling
//     after 1 s, 2 s, 4 s, 5 s..., so Increase(n) takes about n seconds
//     even when the machines boot at once.
//   - Update lists the servers that exist; a deleted server just stops
//     being reported (never as deleted).
//   - ConnectInfo's OS is the image's os_flavor ("debian"), not "linux",
//     its Arch comes from the server type's architecture, its
//     ExternalAddr is public_net.ipv4.ip, and its Key is the connector's
//     (or the plugin's own) private key.
//   - ConnectInfo of a server that no longer exists crashes the plugin
//     process (the API's 404 becomes a nil server it dereferences), as it
//     would against the real API.
//   - A 429 (rate_limit_exceeded) is retried inside hcloud-go, up to five
//     times with a 1 s, 1-2 s, 1-4 s... backoff that ignores Retry-After;
//     other errors, 503 among them, reach the caller at once.
package hcloudtest
