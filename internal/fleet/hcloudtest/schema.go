package hcloudtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The wire types below carry the JSON field names of the Hetzner Cloud
// API (as hcloud-go's schema package spells them). They are local because
// hcloud-go is not a dependency of drover; only the fields the API always
// sends are here, with null for the optional objects the stand-in never
// has (iso, placement_group, backup_window, ...), since a client may
// dereference what the real API always sends.

type errorBody struct {
	Error apiError `json:"error"`
}

type apiError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details"`
}

type pagination struct {
	Page         int  `json:"page"`
	PerPage      int  `json:"per_page"`
	PreviousPage *int `json:"previous_page"`
	NextPage     *int `json:"next_page"`
	LastPage     int  `json:"last_page"`
	TotalEntries int  `json:"total_entries"`
}

type meta struct {
	Pagination pagination `json:"pagination"`
}

type locationJSON struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Country     string  `json:"country"`
	City        string  `json:"city"`
	Latitude    float64 `json:"latitude"`
	Longitude   float64 `json:"longitude"`
	NetworkZone string  `json:"network_zone"`
}

type serverTypeLocationJSON struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Deprecation *struct{} `json:"deprecation"`
	Available   bool      `json:"available"`
	Recommended bool      `json:"recommended"`
}

type serverTypeJSON struct {
	ID           int64                    `json:"id"`
	Name         string                   `json:"name"`
	Description  string                   `json:"description"`
	Category     string                   `json:"category"`
	Cores        int                      `json:"cores"`
	Memory       float32                  `json:"memory"`
	Disk         int                      `json:"disk"`
	StorageType  string                   `json:"storage_type"`
	CPUType      string                   `json:"cpu_type"`
	Architecture string                   `json:"architecture"`
	Deprecated   bool                     `json:"deprecated"`
	Deprecation  *struct{}                `json:"deprecation"`
	Prices       []struct{}               `json:"prices"`
	Locations    []serverTypeLocationJSON `json:"locations"`
}

type imageJSON struct {
	ID           int64             `json:"id"`
	Type         string            `json:"type"`
	Status       string            `json:"status"`
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	ImageSize    *float32          `json:"image_size"`
	DiskSize     float32           `json:"disk_size"`
	Created      time.Time         `json:"created"`
	CreatedFrom  *struct{}         `json:"created_from"`
	BoundTo      *int64            `json:"bound_to"`
	OSFlavor     string            `json:"os_flavor"`
	OSVersion    string            `json:"os_version"`
	Architecture string            `json:"architecture"`
	RapidDeploy  bool              `json:"rapid_deploy"`
	Protection   protectionJSON    `json:"protection"`
	Deprecated   *time.Time        `json:"deprecated"`
	Deleted      *time.Time        `json:"deleted"`
	Labels       map[string]string `json:"labels"`
}

type protectionJSON struct {
	Delete bool `json:"delete"`
}

type serverProtectionJSON struct {
	Delete  bool `json:"delete"`
	Rebuild bool `json:"rebuild"`
}

type sshKeyJSON struct {
	ID          int64             `json:"id"`
	Name        string            `json:"name"`
	Fingerprint string            `json:"fingerprint"`
	PublicKey   string            `json:"public_key"`
	Labels      map[string]string `json:"labels"`
	Created     time.Time         `json:"created"`
}

type ipv4JSON struct {
	ID      int64  `json:"id"`
	IP      string `json:"ip"`
	Blocked bool   `json:"blocked"`
	DNSPtr  string `json:"dns_ptr"`
}

type publicNetJSON struct {
	IPv4        *ipv4JSON  `json:"ipv4"`
	IPv6        *struct{}  `json:"ipv6"`
	FloatingIPs []int64    `json:"floating_ips"`
	Firewalls   []struct{} `json:"firewalls"`
}

type serverJSON struct {
	ID              int64                `json:"id"`
	Name            string               `json:"name"`
	Status          string               `json:"status"`
	Created         time.Time            `json:"created"`
	PublicNet       publicNetJSON        `json:"public_net"`
	PrivateNet      []struct{}           `json:"private_net"`
	ServerType      serverTypeJSON       `json:"server_type"`
	Location        locationJSON         `json:"location"`
	Datacenter      *struct{}            `json:"datacenter"`
	Image           *imageJSON           `json:"image"`
	ISO             *struct{}            `json:"iso"`
	Labels          map[string]string    `json:"labels"`
	Volumes         []int64              `json:"volumes"`
	LoadBalancers   []int64              `json:"load_balancers"`
	Protection      serverProtectionJSON `json:"protection"`
	IncludedTraffic uint64               `json:"included_traffic"`
	OutgoingTraffic *uint64              `json:"outgoing_traffic"`
	IngoingTraffic  *uint64              `json:"ingoing_traffic"`
	BackupWindow    *string              `json:"backup_window"`
	RescueEnabled   bool                 `json:"rescue_enabled"`
	Locked          bool                 `json:"locked"`
	PrimaryDiskSize int                  `json:"primary_disk_size"`
	PlacementGroup  *struct{}            `json:"placement_group"`
}

type resourceJSON struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
}

type actionErrorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type actionJSON struct {
	ID        int64            `json:"id"`
	Command   string           `json:"command"`
	Status    string           `json:"status"`
	Progress  int              `json:"progress"`
	Started   time.Time        `json:"started"`
	Finished  *time.Time       `json:"finished"`
	Resources []resourceJSON   `json:"resources"`
	Error     *actionErrorJSON `json:"error"`
}

// idOrName is a reference the API takes either as a number or as a
// string (a name, or an ID written as a string).
type idOrName struct {
	ID   int64
	Name string
}

func (o *idOrName) UnmarshalJSON(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return err
	}
	switch v := v.(type) {
	case json.Number:
		id, err := v.Int64()
		if err != nil {
			return fmt.Errorf("want an ID or a name, got %s", data)
		}
		o.ID = id
	case string:
		if id, err := strconv.ParseInt(v, 10, 64); err == nil {
			o.ID = id
		} else {
			o.Name = v
		}
	case nil:
	default:
		return fmt.Errorf("want an ID or a name, got %s", data)
	}
	return nil
}

func (o idOrName) empty() bool { return o.ID == 0 && o.Name == "" }

func (o idOrName) String() string {
	if o.ID != 0 {
		return strconv.FormatInt(o.ID, 10)
	}
	return o.Name
}

// serverCreateRequest is the body of POST /servers, every field the API
// documents; the ones the stand-in does not model are refused when set.
type serverCreateRequest struct {
	Name             string             `json:"name"`
	ServerType       idOrName           `json:"server_type"`
	Image            idOrName           `json:"image"`
	SSHKeys          []idOrName         `json:"ssh_keys"`
	Location         idOrName           `json:"location"`
	Datacenter       idOrName           `json:"datacenter"`
	UserData         string             `json:"user_data"`
	StartAfterCreate *bool              `json:"start_after_create"`
	Labels           map[string]string  `json:"labels"`
	Automount        *bool              `json:"automount"`
	Volumes          []int64            `json:"volumes"`
	Networks         []int64            `json:"networks"`
	Firewalls        []json.RawMessage  `json:"firewalls"`
	PlacementGroup   int64              `json:"placement_group"`
	PublicNet        *createPublicNetIn `json:"public_net"`
}

type createPublicNetIn struct {
	EnableIPv4 bool  `json:"enable_ipv4"`
	EnableIPv6 bool  `json:"enable_ipv6"`
	IPv4       int64 `json:"ipv4"`
	IPv6       int64 `json:"ipv6"`
}

type sshKeyCreateRequest struct {
	Name      string            `json:"name"`
	PublicKey string            `json:"public_key"`
	Labels    map[string]string `json:"labels"`
}
