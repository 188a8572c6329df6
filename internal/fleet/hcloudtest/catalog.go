package hcloudtest

import (
	"net/http"
	"runtime"
	"slices"
	"time"
)

// The catalogue: what GET /locations, /server_types and /images list. The
// IDs are the stand-in's own; names and specifications follow Hetzner's.

var locations = []locationJSON{
	{ID: 1, Name: "fsn1", Description: "Falkenstein DC Park 1", Country: "DE", City: "Falkenstein", Latitude: 50.47612, Longitude: 12.370071, NetworkZone: "eu-central"},
	{ID: 2, Name: "nbg1", Description: "Nuremberg DC Park 1", Country: "DE", City: "Nuremberg", Latitude: 49.452102, Longitude: 11.076665, NetworkZone: "eu-central"},
	{ID: 3, Name: "hel1", Description: "Helsinki DC Park 1", Country: "FI", City: "Helsinki", Latitude: 60.169855, Longitude: 24.938379, NetworkZone: "eu-central"},
}

var serverTypes = func() []serverTypeJSON {
	t := func(id int64, name, arch string, cores int, mem float32, disk int) serverTypeJSON {
		st := serverTypeJSON{
			ID: id, Name: name, Description: name, Category: "shared_vcpu",
			Cores: cores, Memory: mem, Disk: disk, StorageType: "local", CPUType: "shared",
			Architecture: arch, Prices: []struct{}{},
		}
		for _, l := range locations {
			st.Locations = append(st.Locations, serverTypeLocationJSON{ID: l.ID, Name: l.Name, Available: true, Recommended: true})
		}
		return st
	}
	return []serverTypeJSON{
		t(101, "cx23", "x86", 2, 4, 40),
		t(102, "cpx22", "x86", 2, 4, 80),
		t(103, "cpx42", "x86", 8, 16, 320),
		t(201, "cax11", "arm", 2, 4, 40),
		t(202, "cax21", "arm", 4, 8, 80),
	}
}()

var images = func() []imageJSON {
	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var list []imageJSON
	id := int64(1001)
	for _, img := range []struct{ name, flavor, version, desc string }{
		{"debian-12", "debian", "12", "Debian 12"},
		{"debian-13", "debian", "13", "Debian 13"},
		{"ubuntu-24.04", "ubuntu", "24.04", "Ubuntu 24.04"},
	} {
		for _, arch := range []string{"x86", "arm"} {
			list = append(list, imageJSON{
				ID: id, Type: "system", Status: "available", Name: img.name, Description: img.desc,
				DiskSize: 5, Created: created, OSFlavor: img.flavor, OSVersion: img.version,
				Architecture: arch, RapidDeploy: true, Labels: map[string]string{},
			})
			id++
		}
	}
	return list
}()

// hostServerType is a server type whose architecture is this machine's,
// so that the plugin's ConnectInfo reports the architecture the machines
// (containers on this host) really have.
func hostServerType() string {
	if runtime.GOARCH == "arm64" {
		return "cax11"
	}
	return "cpx22"
}

func findLocation(ref idOrName) (locationJSON, bool) {
	i := slices.IndexFunc(locations, func(l locationJSON) bool {
		return (ref.ID != 0 && l.ID == ref.ID) || (ref.Name != "" && l.Name == ref.Name)
	})
	if i < 0 {
		return locationJSON{}, false
	}
	return locations[i], true
}

func findServerType(ref idOrName) (serverTypeJSON, bool) {
	i := slices.IndexFunc(serverTypes, func(t serverTypeJSON) bool {
		return (ref.ID != 0 && t.ID == ref.ID) || (ref.Name != "" && t.Name == ref.Name)
	})
	if i < 0 {
		return serverTypeJSON{}, false
	}
	return serverTypes[i], true
}

// findImage finds an image by ID, or by name for the given architecture
// (the API resolves a name to the image of the server type's
// architecture).
func findImage(ref idOrName, arch string) (imageJSON, bool) {
	i := slices.IndexFunc(images, func(im imageJSON) bool {
		if ref.ID != 0 {
			return im.ID == ref.ID
		}
		return im.Name == ref.Name && im.Architecture == arch
	})
	if i < 0 {
		return imageJSON{}, false
	}
	return images[i], true
}

func (s *Server) listLocations(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "name", "sort")
	if !ok {
		return
	}
	list := slices.DeleteFunc(slices.Clone(locations), func(l locationJSON) bool {
		return q.Has("name") && l.Name != q.Get("name")
	})
	writeList(w, r, "locations", list)
}

func (s *Server) getLocation(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "location", "location", func(id int64) (locationJSON, bool) { return findLocation(idOrName{ID: id}) })
}

func (s *Server) listServerTypes(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "name", "sort")
	if !ok {
		return
	}
	list := slices.DeleteFunc(slices.Clone(serverTypes), func(t serverTypeJSON) bool {
		return q.Has("name") && t.Name != q.Get("name")
	})
	writeList(w, r, "server_types", list)
}

func (s *Server) getServerType(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "server_type", "server type", func(id int64) (serverTypeJSON, bool) { return findServerType(idOrName{ID: id}) })
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	q, sel, ok := s.listQuery(w, r, "name", "architecture", "include_deprecated", "type", "status", "label_selector", "sort")
	if !ok {
		return
	}
	list := slices.DeleteFunc(slices.Clone(images), func(im imageJSON) bool {
		return (q.Has("name") && im.Name != q.Get("name")) ||
			(q.Has("architecture") && !slices.Contains(q["architecture"], im.Architecture)) ||
			(q.Has("type") && !slices.Contains(q["type"], im.Type)) ||
			(q.Has("status") && !slices.Contains(q["status"], im.Status)) ||
			!sel.matches(im.Labels)
	})
	writeList(w, r, "images", list)
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "image", "image", func(id int64) (imageJSON, bool) { return findImage(idOrName{ID: id}, "") })
}

// listVolumes answers the plugin's search for its volumes: the stand-in
// has none (volume_size is not modelled; POST /volumes is unexpected).
func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := s.listQuery(w, r, "name", "label_selector", "status", "sort"); !ok {
		return
	}
	writeList(w, r, "volumes", []struct{}{})
}
