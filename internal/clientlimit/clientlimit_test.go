package clientlimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func apiserver(t *testing.T, apf bool) *rest.Config {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		if apf {
			w.Header().Set(FlowSchemaHeader, "fs-uid")
			w.Header().Set(PriorityLevelHeader, "pl-uid")
		}
		_, _ = w.Write([]byte(`{"gitVersion":"v1.36.3"}`))
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

func TestDecide(t *testing.T) {
	ctx := context.Background()
	down := &rest.Config{Host: "http://127.0.0.1:1"}
	cases := []struct {
		name   string
		cfg    *rest.Config
		set    bool
		qps    float32
		want   float32
		reason string
	}{
		{"APF: no limit", apiserver(t, true), false, 500, Unlimited, "apf"},
		{"no APF: the default", apiserver(t, false), false, 500, 500, "fallback"},
		{"apiserver unreachable: the default", down, false, 500, 500, "fallback"},
		{"the operator's limit is kept under APF", apiserver(t, true), true, 50, 50, "flag"},
		{"the operator's negative limit: none", apiserver(t, false), true, -1, Unlimited, "flag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(ctx, tc.cfg, tc.set, tc.qps, 1000)
			if d.QPS != tc.want || d.Reason != tc.reason {
				t.Errorf("got qps %v reason %s, want %v %s", d.QPS, d.Reason, tc.want, tc.reason)
			}
		})
	}
}

// Under APF the clients built from the decided config have no limiter;
// without it they have the default one.
func TestNoLimiterUnderAPF(t *testing.T) {
	for _, apf := range []bool{true, false} {
		cfg := apiserver(t, apf)
		Decide(context.Background(), cfg, false, 500, 1000).Apply(cfg)
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if limiter := client.CoreV1().RESTClient().GetRateLimiter(); (limiter == nil) != apf {
			t.Errorf("APF %v: limiter %v", apf, limiter)
		} else if limiter != nil && limiter.QPS() != 500 {
			t.Errorf("fallback limiter at %v QPS, want 500", limiter.QPS())
		}
	}
}
