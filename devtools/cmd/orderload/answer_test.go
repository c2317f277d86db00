package main

import (
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		ra     bool
		want   answer
	}{
		{201, "", false, answer{kind: kindCreated}},
		{409, "out_of_stock", false, answer{kind: kindConflict}},
		{503, "service_unavailable", true, answer{kind: kindShedRA}},
		{503, "service_unavailable", false, answer{kind: kindShedNoRA}},
		{503, "outcome_unknown", true, answer{kind: kindShedRA, uncertain: true}},
		{503, "", false, answer{kind: kindShedNoRA, uncertain: true}},
		{500, "internal_error", false, answer{kind: kindOther, label: "500 internal_error", uncertain: true}},
		{202, "", false, answer{kind: kindOther, label: "202", uncertain: true}},
		{401, "unauthorized", false, answer{kind: kindOther, label: "401 unauthorized"}},
		{422, "", false, answer{kind: kindOther, label: "422"}},
	} {
		if got := classify(tc.status, tc.code, tc.ra); got != tc.want {
			t.Errorf("classify(%d, %q, %v) = %+v, want %+v", tc.status, tc.code, tc.ra, got, tc.want)
		}
	}
	if a := noAnswer(true, false); a.kind != kindTimeout || !a.uncertain {
		t.Errorf("timeout: %+v", a)
	}
	if a := noAnswer(false, false); a.kind != kindOther || a.label != labelTransport || !a.uncertain {
		t.Errorf("transport: %+v", a)
	}
	if a := noAnswer(true, true); a.label != labelCancelled {
		t.Errorf("cancelled: %+v", a)
	}
}

func TestProblemCode(t *testing.T) {
	if c := problemCode(503, []byte(`{"code":"service_unavailable","title":"x"}`)); c != "service_unavailable" {
		t.Errorf("code %q", c)
	}
	if c := problemCode(201, []byte(`{"code":"x"}`)); c != "" {
		t.Errorf("a 201 has no problem code, got %q", c)
	}
	if c := problemCode(500, []byte(`not json`)); c != "" {
		t.Errorf("not json: %q", c)
	}
}
