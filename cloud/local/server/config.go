package server

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// Config of a local cloud.
type Config struct {
	// StatePath is the state file (bbolt); it is created when missing.
	StatePath string
	// Token is the bearer token every API call must carry.
	Token string
	// Region and Zones of the cloud; instances are placed in a zone.
	Region string
	Zones  []string
	// InstanceTypes that may be requested; the first is the default.
	InstanceTypes []string
	// InternalCIDR, ExternalCIDR and VIPCIDR are the address pools of
	// instances' internal and external IPs and of load balancer VIPs. They
	// must lie in the allowed prefixes (by default 127.0.0.0/8).
	InternalCIDR, ExternalCIDR, VIPCIDR string
	// AllowedPrefixes bound every address the cloud hands out or forwards
	// to. Default 127.0.0.0/8: nothing leaves the machine.
	AllowedPrefixes []netip.Prefix
	// DNSDomain is the suffix of instances' InternalDNS names.
	DNSDomain string
	// MetadataPort is the port of each instance's metadata service on its
	// internal IP; 0 picks a free port per instance.
	MetadataPort int
	// Issuer of identity tokens; TokenTTL their lifetime.
	Issuer   string
	TokenTTL time.Duration
	// KeyRotation is how often the identity key rotates; 0 never.
	KeyRotation time.Duration
	// RateLimit (calls per second) and RateBurst bound API calls; a zero
	// RateLimit means unlimited.
	RateLimit float64
	RateBurst int
	// Faults injected from the start.
	Faults api.Faults
	// BootDelay is how long a new or started instance stays pending.
	BootDelay time.Duration
	// TerminatedRetention is how long a terminated instance stays listed
	// (and keeps its addresses) before it is removed.
	TerminatedRetention time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultRegion       = "local-1"
	DefaultInternalCIDR = "127.10.0.0/16"
	DefaultExternalCIDR = "127.20.0.0/16"
	DefaultVIPCIDR      = "127.30.0.0/16"
	DefaultDNSDomain    = "localcloud.internal"
	DefaultIssuer       = "mooring-localcloud"
	DefaultTokenTTL     = 5 * time.Minute
	DefaultKeyRotation  = 24 * time.Hour
	DefaultRetention    = time.Hour
)

// withDefaults fills unset fields and validates the result.
func (c Config) withDefaults() (Config, error) {
	if c.StatePath == "" {
		return c, errors.New("config: StatePath is required")
	}
	if c.Token == "" {
		return c, errors.New("config: Token is required")
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if len(c.Zones) == 0 {
		c.Zones = []string{c.Region + "a", c.Region + "b", c.Region + "c"}
	}
	if len(c.InstanceTypes) == 0 {
		c.InstanceTypes = []string{"standard-2", "standard-4", "highmem-4"}
	}
	if c.InternalCIDR == "" {
		c.InternalCIDR = DefaultInternalCIDR
	}
	if c.ExternalCIDR == "" {
		c.ExternalCIDR = DefaultExternalCIDR
	}
	if c.VIPCIDR == "" {
		c.VIPCIDR = DefaultVIPCIDR
	}
	if len(c.AllowedPrefixes) == 0 {
		c.AllowedPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	if c.DNSDomain == "" {
		c.DNSDomain = DefaultDNSDomain
	}
	if c.Issuer == "" {
		c.Issuer = DefaultIssuer
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.TerminatedRetention <= 0 {
		c.TerminatedRetention = DefaultRetention
	}
	if err := checkRateLimit(api.RateLimit{Limit: c.RateLimit, Burst: c.RateBurst}); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	c.RateBurst = api.RateLimit{Limit: c.RateLimit, Burst: c.RateBurst}.EffectiveBurst()
	if c.MetadataPort < 0 || c.MetadataPort > 65535 {
		return c, fmt.Errorf("config: MetadataPort %d out of range", c.MetadataPort)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
