package agent

// The agent's config names a backend; the binary registers every backend's
// node identity through cloud/all/agentid, the tests the local cloud's.
import _ "github.com/mooring-dev/mooring/cloud/local/agentid"
