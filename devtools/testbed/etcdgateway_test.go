package testbed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestGatewayCall checks the decoding of the gateway's answers, as etcd
// 3.4.23 writes them (uint64 fields as JSON strings, zero fields left
// out), and its error answers, against a stand-in server on loopback.
func TestGatewayCall(t *testing.T) {
	answers := map[string]string{
		"/v3/maintenance/status": `{"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709",` +
			`"revision":"1","raft_term":"2"},"version":"3.4.23","leader":"13668033151171901709","raftIndex":"4","raftTerm":"2"}`,
		"/v3/cluster/member/list": `{"header":{"member_id":"1"},"members":[{"ID":"13668033151171901709","name":"etcd1"},` +
			`{"ID":7,"name":"etcd2"}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.URL.Path]
		switch {
		case r.Method != http.MethodPost:
			http.Error(w, "want POST", http.StatusMethodNotAllowed)
		case !ok:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"etcdserver: no leader","message":"etcdserver: no leader","code":14}`))
		default:
			_, _ = w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var st gatewayStatus
	if err := gatewayCall(ctx, addr, "/v3/maintenance/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.Header.MemberID != 13668033151171901709 || st.Leader != st.Header.MemberID || st.RaftTerm != 2 || st.RaftIndex != 4 {
		t.Errorf("status decoded as %+v", st)
	}
	var list gatewayMembers
	if err := gatewayCall(ctx, addr, "/v3/cluster/member/list", &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 2 || list.Members[0].ID != 13668033151171901709 || list.Members[1].ID != 7 || list.Members[1].Name != "etcd2" {
		t.Errorf("member list decoded as %+v", list.Members)
	}
	err := gatewayCall(ctx, addr, "/v3/absent", &st)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "etcdserver: no leader") {
		t.Errorf("error answer: %v, want the status and etcd's message", err)
	}
}

// TestGatewayUint64 checks the forms a uint64 may take in the gateway's
// JSON, and that others are refused.
func TestGatewayUint64(t *testing.T) {
	for in, want := range map[string]uint64{`"18446744073709551615"`: 1<<64 - 1, `42`: 42, `null`: 0, `"0"`: 0} {
		var u gatewayUint64
		if err := u.UnmarshalJSON([]byte(in)); err != nil || uint64(u) != want {
			t.Errorf("%s: %d, %v, want %d", in, u, err, want)
		}
	}
	for _, in := range []string{`"-1"`, `"x"`, `1.5`, `"18446744073709551616"`, `true`} {
		var u gatewayUint64
		if err := u.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s: decoded as %d, want an error", in, u)
		}
	}
}
