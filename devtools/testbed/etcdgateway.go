package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The bed talks to its etcd members through etcd's HTTP JSON gateway on
// their client ports (POST /v3/<service>/<method> with a JSON body), so
// that the core links neither etcd's client nor gRPC. Clients for tests
// come from devtools/testbed/etcdbed.

const (
	// etcdCallTimeout bounds one gateway call when the caller's context
	// allows longer.
	etcdCallTimeout = 5 * time.Second
	// maxGatewayAnswer bounds the answer read from a member.
	maxGatewayAnswer = 1 << 20
)

// etcdHTTP is the HTTP client of the members' gateways. It takes no proxy
// from the environment (the members are on loopback), and opens a new
// connection for every call, so that no call reuses a connection that a
// kill, pause or partition left dead, and no idle connection outlives it.
var etcdHTTP = &http.Client{Transport: &http.Transport{
	Proxy:                  nil,
	DialContext:            (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	DisableKeepAlives:      true,
	MaxResponseHeaderBytes: 64 << 10,
}}

// gatewayCall posts an empty request ({}) to path on the member whose
// client address is addr, and decodes its JSON answer into out.
func gatewayCall(ctx context.Context, addr, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, strings.NewReader("{}"))
	if err != nil {
		return fmt.Errorf("etcd gateway: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := etcdHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("etcd gateway: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxGatewayAnswer))
	if err != nil {
		return fmt.Errorf("etcd gateway: read the answer to %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd gateway: %s: %s: %s", path, resp.Status, gatewayMessage(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("etcd gateway: decode the answer to %s: %w", path, err)
	}
	return nil
}

// gatewayMessage is the message of the gateway's error answer
// ({"error": ..., "message": ..., "code": ...}), or the start of body.
func gatewayMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return e.Message
	}
	const most = 200
	if len(body) > most {
		body = body[:most]
	}
	return strings.TrimSpace(string(body))
}

// gatewayUint64 is a uint64 as the gateway writes it: a JSON string of
// digits, as protobuf's JSON mapping has it, or a number. An absent field
// (protobuf's zero value) leaves it 0.
type gatewayUint64 uint64

// UnmarshalJSON accepts "123", 123 and null.
func (u *gatewayUint64) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("etcd gateway: uint64 %s: %w", b, err)
	}
	*u = gatewayUint64(v)
	return nil
}

// gatewayHeader is the header of every answer.
type gatewayHeader struct {
	MemberID gatewayUint64 `json:"member_id"`
	RaftTerm gatewayUint64 `json:"raft_term"`
}

// gatewayStatus is the answer to /v3/maintenance/status.
type gatewayStatus struct {
	Header    gatewayHeader `json:"header"`
	Leader    gatewayUint64 `json:"leader"`
	RaftIndex gatewayUint64 `json:"raftIndex"`
	RaftTerm  gatewayUint64 `json:"raftTerm"`
}

// gatewayMember is one member in the answer to /v3/cluster/member/list.
type gatewayMember struct {
	ID   gatewayUint64 `json:"ID"`
	Name string        `json:"name"`
}

// gatewayMembers is the answer to /v3/cluster/member/list.
type gatewayMembers struct {
	Members []gatewayMember `json:"members"`
}
