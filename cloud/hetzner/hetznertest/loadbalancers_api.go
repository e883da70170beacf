package hetznertest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"k8s.io/apimachinery/pkg/labels"
)

// The handlers of /v1/load_balancers and its actions.

var (
	lbPath       = regexp.MustCompile(`^/v1/load_balancers/([0-9]+)$`)
	lbActionPath = regexp.MustCompile(`^/v1/load_balancers/([0-9]+)/actions/([a-z_]+)$`)
)

func (c *Cloud) serveLoadBalancers(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v1/load_balancers" && r.Method == http.MethodGet:
		c.serveLBList(w, r)
	case p == "/v1/load_balancers" && r.Method == http.MethodPost:
		c.serveLBCreate(w, r)
	case lbPath.MatchString(p):
		id, _ := strconv.ParseInt(lbPath.FindStringSubmatch(p)[1], 10, 64)
		switch r.Method {
		case http.MethodGet:
			if f := c.count("lb-get", 0); f != nil {
				faultAnswer(w, f)
				return
			}
			l, ok := c.LoadBalancer(id)
			if !ok {
				lbNotFound(w, id)
				return
			}
			cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"load_balancer": wireLB(l)})
		case http.MethodPut:
			c.serveLBUpdate(w, r, id)
		case http.MethodDelete:
			c.serveLBDelete(w, id)
		default:
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed", nil)
		}
	case lbActionPath.MatchString(p) && r.Method == http.MethodPost:
		m := lbActionPath.FindStringSubmatch(p)
		id, _ := strconv.ParseInt(m[1], 10, 64)
		c.serveLBAction(w, r, id, m[2])
	default:
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
	}
}

func lbNotFound(w http.ResponseWriter, id int64) {
	writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("load_balancer with ID '%d' not found", id), nil)
}

// lbListParams are the query parameters of GET /load_balancers.
var lbListParams = map[string]bool{"page": true, "per_page": true, "label_selector": true, "sort": true, "name": true}

func (c *Cloud) serveLBList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, perPage, sel, ok := c.listQuery(w, q, "lb-list", lbListParams)
	if !ok {
		return
	}
	for _, k := range q["sort"] {
		if f, _, _ := strings.Cut(k, ":"); f != "id" && f != "name" && f != "created" {
			invalidInput(w, "sort", fmt.Sprintf("unknown sort field %q", f))
			return
		}
	}
	var match []LoadBalancer
	for _, l := range c.LoadBalancers() {
		if sel.Matches(labels.Set(l.Labels)) && (q.Get("name") == "" || l.Name == q.Get("name")) {
			match = append(match, l)
		}
	}
	from, to, p := paged(len(match), page, perPage)
	out := []wireLoadBalancer{}
	for _, l := range match[from:to] {
		out = append(out, wireLB(l))
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"load_balancers": out, "meta": map[string]any{"pagination": p}})
}

func (c *Cloud) serveLBCreate(w http.ResponseWriter, r *http.Request) {
	if f := c.count("lb-create", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	var req reqCreate
	if f := decodeBody(r, &req); f != nil {
		f.write(w)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, f := c.lbFromCreate(req)
	if f != nil {
		f.write(w)
		return
	}
	act, fail := c.startAction("create_load_balancer", ActionResource{ID: l.ID, Type: "load_balancer"})
	if fail {
		// The action failed: the load balancer is not made.
		cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"load_balancer": wireLB(l), "action": act})
		return
	}
	s.all[l.ID] = &l
	if err := c.serveLB(&l); err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "data plane: "+err.Error(), nil)
		return
	}
	cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"load_balancer": wireLB(l.clone()), "action": act})
}

func (c *Cloud) serveLBUpdate(w http.ResponseWriter, r *http.Request, id int64) {
	if f := c.count("lb-update", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	var req struct {
		Name   *string            `json:"name"`
		Labels *map[string]string `json:"labels"`
	}
	if f := decodeBody(r, &req); f != nil {
		f.write(w)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.all[id]
	if !ok {
		lbNotFound(w, id)
		return
	}
	if req.Name != nil {
		if f := c.checkName(*req.Name, id); f != nil {
			f.write(w)
			return
		}
	}
	if req.Labels != nil {
		if f := checkLabels(*req.Labels); f != nil {
			f.write(w)
			return
		}
	}
	if req.Name != nil {
		l.Name = *req.Name
	}
	if req.Labels != nil {
		l.Labels = maps.Clone(*req.Labels)
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"load_balancer": wireLB(l.clone())})
}

func (c *Cloud) serveLBDelete(w http.ResponseWriter, id int64) {
	if f := c.count("lb-delete", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.all[id]
	if !ok {
		lbNotFound(w, id)
		return
	}
	if l.Protected {
		writeError(w, http.StatusForbidden, "protected", "load balancer is delete protected", nil)
		return
	}
	if f := c.lock(id); f != nil {
		f.write(w)
		return
	}
	act, fail := c.startAction("delete_load_balancer", ActionResource{ID: id, Type: "load_balancer"})
	if !fail {
		delete(s.all, id)
		s.plane.Remove(fmt.Sprint(id))
		s.plane.Remove(fmt.Sprint(id) + "/private")
	}
	// The API answers a deletion with its action (as hcloud-go's
	// DeleteWithResult reads it).
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"action": act})
}

// serveLBAction serves POST /load_balancers/{id}/actions/{action}, counted
// as lb-update.
func (c *Cloud) serveLBAction(w http.ResponseWriter, r *http.Request, id int64, name string) {
	if f := c.count("lb-update", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.all[id]
	if !ok {
		lbNotFound(w, id)
		return
	}
	l := cur.clone()
	var f *apiFail
	switch name {
	case "add_target":
		var req reqTarget
		if f = decodeBody(r, &req); f == nil {
			var t LBTarget
			if t, f = c.target(&l, req); f == nil {
				l.Targets = append(l.Targets, t)
			}
		}
	case "remove_target":
		var req reqTarget
		if f = decodeBody(r, &req); f == nil {
			if req.Type != "server" || req.Server == nil {
				f = invalid("type", "only server targets are modelled by hetznertest")
				break
			}
			n := len(l.Targets)
			l.Targets = slices.DeleteFunc(l.Targets, func(t LBTarget) bool { return t.Server == req.Server.ID })
			if len(l.Targets) == n {
				f = invalid("server", fmt.Sprintf("server with ID '%d' is no target of the Load Balancer", req.Server.ID))
			}
		}
	case "add_service":
		var req reqService
		if f = decodeBody(r, &req); f == nil {
			var svc LBService
			if svc, f = c.service(req, nil); f == nil {
				f = addService(&l, svc)
			}
		}
	case "update_service":
		var req reqService
		if f = decodeBody(r, &req); f == nil {
			if req.ListenPort == nil {
				f = invalid("listen_port", "is required")
				break
			}
			i := slices.IndexFunc(l.Services, func(s LBService) bool { return s.ListenPort == *req.ListenPort })
			if i < 0 {
				f = &apiFail{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("service with listen port %d not found", *req.ListenPort)}
				break
			}
			l.Services[i], f = c.service(req, &l.Services[i])
		}
	case "delete_service":
		var req struct {
			ListenPort int `json:"listen_port"`
		}
		if f = decodeBody(r, &req); f == nil {
			n := len(l.Services)
			l.Services = slices.DeleteFunc(l.Services, func(s LBService) bool { return s.ListenPort == req.ListenPort })
			if len(l.Services) == n {
				f = &apiFail{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("service with listen port %d not found", req.ListenPort)}
			}
		}
	case "change_algorithm":
		var req struct {
			Type string `json:"type"`
		}
		if f = decodeBody(r, &req); f == nil {
			if f = checkAlgorithm("type", req.Type); f == nil {
				l.Algorithm = req.Type
			}
		}
	case "change_type":
		var req struct {
			LoadBalancerType json.RawMessage `json:"load_balancer_type"`
		}
		if f = decodeBody(r, &req); f == nil {
			var typ string
			if typ, f = lbType(req.LoadBalancerType); f == nil {
				if len(l.Targets) > LBTypes[typ].MaxTargets || len(l.Services) > LBTypes[typ].MaxServices {
					f = unprocessable("invalid_load_balancer_type", "the load balancer type does not fit the load balancer's targets and services")
					break
				}
				l.Type = typ
			}
		}
	case "attach_to_network":
		var req struct {
			Network int64   `json:"network"`
			IP      *string `json:"ip"`
			IPRange *string `json:"ip_range"`
		}
		if f = decodeBody(r, &req); f == nil {
			switch {
			case l.Network != 0:
				f = unprocessable("load_balancer_already_attached", "the Load Balancer is already attached to a network")
			case !c.networkKnown(req.Network):
				f = invalid("network", fmt.Sprintf("network with ID '%d' not found", req.Network))
			case req.IP != nil || req.IPRange != nil:
				f = invalid("ip", "choosing the private IP or subnet is not modelled by hetznertest")
			default:
				l.Network = req.Network
			}
		}
	case "detach_from_network":
		var req struct {
			Network int64 `json:"network"`
		}
		if f = decodeBody(r, &req); f == nil {
			switch {
			case l.Network == 0 || l.Network != req.Network:
				f = unprocessable("load_balancer_not_attached_to_network", "the Load Balancer is not attached to this network")
			case !l.Public:
				f = unprocessable("load_balancer_public_interface_disabled", "detaching the last network of a Load Balancer without a public interface")
			case slices.ContainsFunc(l.Targets, func(t LBTarget) bool { return t.UsePrivateIP }):
				f = unprocessable("targets_without_use_private_ip", "the Load Balancer has targets that use its private network")
			default:
				l.Network = 0
			}
		}
	case "enable_public_interface", "disable_public_interface":
		var req struct{}
		if f = decodeBody(r, &req); f == nil {
			l.Public = name == "enable_public_interface"
			f = checkInterfaces(l.Public, l.Network)
		}
	default:
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
		return
	}
	if f == nil {
		f = c.lock(id)
	}
	if f != nil {
		f.write(w)
		return
	}
	act, fail := c.startAction(name, ActionResource{ID: id, Type: "load_balancer"})
	if !fail {
		*cur = l
		if err := c.serveLB(cur); err != nil {
			writeError(w, http.StatusInternalServerError, "server_error", "data plane: "+err.Error(), nil)
			return
		}
	}
	cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"action": act})
}
