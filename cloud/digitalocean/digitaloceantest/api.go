package digitaloceantest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// errorIDs are the error ids DigitalOcean answers with, by status.
var errorIDs = map[int]string{
	http.StatusBadRequest:          "bad_request",
	http.StatusUnauthorized:        "unauthorized",
	http.StatusForbidden:           "forbidden",
	http.StatusNotFound:            "not_found",
	http.StatusMethodNotAllowed:    "method_not_allowed",
	http.StatusTooManyRequests:     "too_many_requests",
	http.StatusUnprocessableEntity: "unprocessable_entity",
	http.StatusInternalServerError: "server_error",
	http.StatusServiceUnavailable:  "service_unavailable",
}

// apiError is DigitalOcean's error body.
type apiError struct {
	ID        string `json:"id"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	cloudtest.WriteJSON(w, status, v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	id := errorIDs[status]
	if id == "" {
		id = "server_error"
	}
	writeJSON(w, status, apiError{ID: id, Message: msg, RequestID: w.Header().Get("X-Request-Id")})
}

func (c *Cloud) serveAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Request-Id", requestID())
	if !c.rateLimit(w) {
		writeError(w, http.StatusTooManyRequests, "API Rate limit exceeded.")
		return
	}
	if c.Out.Load() {
		writeError(w, http.StatusServiceUnavailable, "Service Unavailable (injected outage)")
		return
	}
	if !cloudtest.Bearer(r, c.opts.Token) {
		writeError(w, http.StatusUnauthorized, "Unable to authenticate you.")
		return
	}
	if p := r.URL.Path; p == "/v2/load_balancers" || strings.HasPrefix(p, "/v2/load_balancers/") && !strings.Contains(p[len("/v2/load_balancers/"):], "/") {
		c.serveLBAPI(w, r, strings.TrimPrefix(strings.TrimPrefix(p, "/v2/load_balancers"), "/"))
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "digitaloceantest serves only GET")
		return
	}
	switch p := r.URL.Path; {
	case p == "/v2/droplets":
		c.serveList(w, r)
	case strings.HasPrefix(p, "/v2/droplets/") && !strings.Contains(p[len("/v2/droplets/"):], "/"):
		c.serveGet(w, p[len("/v2/droplets/"):])
	default:
		writeError(w, http.StatusNotFound, "The resource you were accessing could not be found.")
	}
}

// rateLimit counts the request against the hourly budget and sets the
// RateLimit-* headers; false when the budget is spent.
func (c *Cloud) rateLimit(w http.ResponseWriter) bool {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	allowed := c.window.Take(now)
	cloudtest.SetRateLimitHeaders(w.Header(), c.opts.HourlyLimit, c.window.Remaining(), c.window.ResetAt(now))
	return allowed
}

type listAnswer struct {
	Droplets []wireDroplet `json:"droplets"`
	Links    wireLinks     `json:"links"`
	Meta     wireMeta      `json:"meta"`
}

type wireLinks struct {
	Pages *wirePages `json:"pages,omitempty"`
}

type wirePages struct {
	First string `json:"first,omitempty"`
	Prev  string `json:"prev,omitempty"`
	Next  string `json:"next,omitempty"`
	Last  string `json:"last,omitempty"`
}

type wireMeta struct {
	Total int `json:"total"`
}

func (c *Cloud) serveList(w http.ResponseWriter, r *http.Request) {
	if st := c.count(MethodList); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	q := r.URL.Query()
	page, perPage, ok := pageQuery(w, q, MaxPerPage, "tag_name")
	if !ok {
		return
	}
	tag, tagged := q.Get("tag_name"), q.Has("tag_name")
	if tagged && tag == "" {
		writeError(w, http.StatusBadRequest, "tag_name must not be empty")
		return
	}

	failStatus, short := c.pageFail.Get(page), c.short.Get(page)
	c.Before.Run(page)
	if failStatus != 0 {
		writeError(w, failStatus, fmt.Sprintf("injected fault on page %d", page))
		return
	}
	all := c.sorted(tag)
	base := "http://" + c.Servers.Addr() + "/v2/droplets"

	total := len(all)
	from, to, last := cloudtest.Page(total, page, perPage)
	out := listAnswer{Droplets: []wireDroplet{}, Meta: wireMeta{Total: total}}
	items := all[from:to]
	if short && page < last && len(items) > 0 {
		items = items[:len(items)-1]
	}
	for _, d := range items {
		out.Droplets = append(out.Droplets, wire(d))
	}
	query := url.Values{}
	if tagged {
		query.Set("tag_name", tag)
	}
	out.Links.Pages = pageLinks(base, query, page, perPage, last)
	writeJSON(w, http.StatusOK, out)
}

// pageQuery reads a list's page and per_page (each at least 1; per_page
// at most maxPerPage), refusing parameters beyond those and extra; ok is
// false when it answered.
func pageQuery(w http.ResponseWriter, q url.Values, maxPerPage int, extra ...string) (page, perPage int, ok bool) {
	for k := range q {
		if k != "page" && k != "per_page" && !slices.Contains(extra, k) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("digitaloceantest does not model the parameter %q", k))
			return 0, 0, false
		}
	}
	intParam := func(name string, def int) (int, bool) {
		s := q.Get(name)
		if s == "" {
			return def, true
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be an integer of at least 1", name))
			return 0, false
		}
		return n, true
	}
	if page, ok = intParam("page", 1); !ok {
		return 0, 0, false
	}
	if perPage, ok = intParam("per_page", DefaultPerPage); !ok {
		return 0, 0, false
	}
	return page, min(perPage, maxPerPage), true
}

// pageLinks is links.pages of a list's page (first and prev after the
// first page, next and last before the last) at base with query and the
// pages' own page and per_page; nil when there is one page.
func pageLinks(base string, query url.Values, page, perPage, last int) *wirePages {
	if last <= 1 {
		return nil
	}
	link := func(n int) string {
		v := maps.Clone(query)
		if v == nil {
			v = url.Values{}
		}
		v.Set("page", strconv.Itoa(n))
		v.Set("per_page", strconv.Itoa(perPage))
		return base + "?" + v.Encode()
	}
	p := &wirePages{}
	if page > 1 {
		p.First, p.Prev = link(1), link(min(page-1, last))
	}
	if page < last {
		p.Next, p.Last = link(page+1), link(last)
	}
	return p
}

func (c *Cloud) serveGet(w http.ResponseWriter, idText string) {
	if st := c.count(MethodGet); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	id, err := strconv.Atoi(idText)
	d, ok := c.Get(id)
	if err != nil || !ok {
		writeError(w, http.StatusNotFound, "The resource you were accessing could not be found.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"droplet": wire(d)})
}

// The droplet as the API shows it: the fields of the droplet in
// DigitalOcean's documented examples (../testdata, compared by
// genuine_test.go).
type wireDroplet struct {
	ID               int          `json:"id"`
	Name             string       `json:"name"`
	Memory           int          `json:"memory"`
	Vcpus            int          `json:"vcpus"`
	Disk             int          `json:"disk"`
	DiskInfo         []wireDisk   `json:"disk_info"`
	Locked           bool         `json:"locked"`
	Status           string       `json:"status"`
	Kernel           *struct{}    `json:"kernel"`
	CreatedAt        string       `json:"created_at"`
	Features         []string     `json:"features"`
	BackupIDs        []int        `json:"backup_ids"`
	NextBackupWindow *struct{}    `json:"next_backup_window"`
	SnapshotIDs      []int        `json:"snapshot_ids"`
	Image            wireImage    `json:"image"`
	VolumeIDs        []string     `json:"volume_ids"`
	Size             wireSize     `json:"size"`
	SizeSlug         string       `json:"size_slug"`
	Networks         wireNetworks `json:"networks"`
	Region           wireRegion   `json:"region"`
	Tags             []string     `json:"tags"`
	VPCUUID          string       `json:"vpc_uuid"`
}

// wireDisk is one disk of a droplet (disk_info).
type wireDisk struct {
	Type string `json:"type"`
	Size struct {
		Amount int    `json:"amount"`
		Unit   string `json:"unit"`
	} `json:"size"`
}

type wireImage struct {
	ID            int      `json:"id"`
	Name          string   `json:"name"`
	Distribution  string   `json:"distribution"`
	Slug          string   `json:"slug"`
	Public        bool     `json:"public"`
	Regions       []string `json:"regions"`
	CreatedAt     string   `json:"created_at"`
	Type          string   `json:"type"`
	MinDiskSize   int      `json:"min_disk_size"`
	SizeGigabytes float64  `json:"size_gigabytes"`
	Description   string   `json:"description"`
	Tags          []string `json:"tags"`
	Status        string   `json:"status"`
	ErrorMessage  string   `json:"error_message"`
}

type wireSize struct {
	Slug         string   `json:"slug"`
	Memory       int      `json:"memory"`
	Vcpus        int      `json:"vcpus"`
	Disk         int      `json:"disk"`
	Transfer     float64  `json:"transfer"`
	PriceMonthly float64  `json:"price_monthly"`
	PriceHourly  float64  `json:"price_hourly"`
	Regions      []string `json:"regions"`
	Available    bool     `json:"available"`
	Description  string   `json:"description"`
}

type wireNetworks struct {
	V4 []wireV4 `json:"v4"`
	V6 []wireV6 `json:"v6"`
}

type wireV4 struct {
	IPAddress string `json:"ip_address"`
	Netmask   string `json:"netmask"`
	Gateway   string `json:"gateway"`
	Type      string `json:"type"`
}

type wireV6 struct {
	IPAddress string `json:"ip_address"`
	Netmask   int    `json:"netmask"`
	Gateway   string `json:"gateway"`
	Type      string `json:"type"`
}

type wireRegion struct {
	Name      string   `json:"name"`
	Slug      string   `json:"slug"`
	Features  []string `json:"features"`
	Available bool     `json:"available"`
	Sizes     []string `json:"sizes"`
}

// regionNames are the display names of a few regions; others show their
// slug.
var regionNames = map[string]string{
	"nyc1": "New York 1", "nyc3": "New York 3", "ams3": "Amsterdam 3", "fra1": "Frankfurt 1",
	"lon1": "London 1", "sfo3": "San Francisco 3", "sgp1": "Singapore 1", "tor1": "Toronto 1",
}

// wire is a droplet as the API shows it. A droplet that is off keeps its
// addresses, as on DigitalOcean.
func wire(d Droplet) wireDroplet {
	var nets wireNetworks
	nets.V4 = []wireV4{}
	nets.V6 = []wireV6{}
	if d.PrivateIP != "" {
		nets.V4 = append(nets.V4, wireV4{IPAddress: d.PrivateIP, Netmask: "255.255.0.0", Gateway: "", Type: "private"})
	}
	if d.PublicIP != "" {
		nets.V4 = append(nets.V4, wireV4{IPAddress: d.PublicIP, Netmask: "255.255.240.0", Gateway: "127.0.0.1", Type: "public"})
	}
	if d.PublicIPv6 != "" {
		nets.V6 = append(nets.V6, wireV6{IPAddress: d.PublicIPv6, Netmask: 64, Gateway: "::1", Type: "public"})
	}
	features := []string{"monitoring", "droplet_agent", "private_networking"}
	if d.PublicIPv6 != "" {
		features = append(features, "ipv6")
	}
	name := regionNames[d.Region]
	if name == "" {
		name = d.Region
	}
	tags := d.Tags
	if tags == nil {
		tags = []string{}
	}
	disk := wireDisk{Type: "local"}
	disk.Size.Amount, disk.Size.Unit = 80, "gib"
	return wireDroplet{
		ID: d.ID, Name: d.Name, Memory: 4096, Vcpus: 2, Disk: 80, DiskInfo: []wireDisk{disk}, Status: d.Status,
		CreatedAt:   d.Created.UTC().Format(time.RFC3339),
		Features:    features,
		BackupIDs:   []int{},
		SnapshotIDs: []int{},
		Image: wireImage{ID: 191457505, Name: "24.04 (LTS) x64", Distribution: "Ubuntu", Slug: "ubuntu-24-04-x64", Public: true,
			Regions: []string{d.Region}, CreatedAt: "2025-04-24T20:16:43Z", Type: "base", MinDiskSize: 7, SizeGigabytes: 2.61,
			Description: "Ubuntu 24.04 (LTS) x64", Tags: []string{}, Status: "available"},
		VolumeIDs: []string{},
		Size: wireSize{Slug: d.Size, Memory: 4096, Vcpus: 2, Disk: 80, Transfer: 4, PriceMonthly: 24, PriceHourly: 0.0357,
			Regions: []string{d.Region}, Available: true, Description: "Basic"},
		SizeSlug: d.Size,
		Networks: nets,
		Region:   wireRegion{Name: name, Slug: d.Region, Features: []string{"backups", "ipv6", "metadata"}, Available: true, Sizes: []string{d.Size}},
		Tags:     tags,
		VPCUUID:  "5a4981aa-9653-4bd1-bef5-d6bff52042e4",
	}
}

// JSON is a droplet as the API shows it, for tests of a client's decoding.
func JSON(d Droplet) ([]byte, error) { return json.Marshal(wire(d)) }
