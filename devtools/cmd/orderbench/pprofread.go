package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// errProfile is returned for a CPU profile that cannot be read.
var errProfile = errors.New("unreadable CPU profile")

// Field numbers of the profile.proto messages that profileByLabel reads.
const (
	pbProfileSampleType  = 1
	pbProfileSample      = 2
	pbProfileStringTable = 6
	pbValueTypeType      = 1
	pbSampleValue        = 2
	pbSampleLabel        = 3
	pbLabelKey           = 1
	pbLabelStr           = 2
)

// Protocol buffer wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// pbField is one field of a protocol buffer message: its number, its wire
// type, and its value (a varint's, or a length-delimited field's bytes).
type pbField struct {
	num, wire int
	v         uint64
	data      []byte
}

// pbFields decodes the fields of one message.
func pbFields(b []byte) ([]pbField, error) {
	var out []pbField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad field key", errProfile)
		}
		b = b[n:]
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case wireVarint:
			if f.v, n = binary.Uvarint(b); n <= 0 {
				return nil, fmt.Errorf("%w: bad varint", errProfile)
			}
		case wireBytes:
			l, m := binary.Uvarint(b)
			if m <= 0 || l > uint64(len(b)-m) {
				return nil, fmt.Errorf("%w: bad length", errProfile)
			}
			f.data, n = b[m:m+int(l)], m+int(l)
		case wireFixed64:
			n = 8
		case wireFixed32:
			n = 4
		default:
			return nil, fmt.Errorf("%w: wire type %d", errProfile, f.wire)
		}
		if n > len(b) {
			return nil, fmt.Errorf("%w: truncated field", errProfile)
		}
		b = b[n:]
		out = append(out, f)
	}
	return out, nil
}

// pbInts returns the integers of a repeated integer field, packed or not.
func pbInts(f pbField) ([]int64, error) {
	if f.wire == wireVarint {
		return []int64{int64(f.v)}, nil
	}
	var out []int64
	for b := f.data; len(b) > 0; {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad packed varint", errProfile)
		}
		out = append(out, int64(v))
		b = b[n:]
	}
	return out, nil
}

// sampleLabels returns a sample's values and its string labels (key and
// value as string table indices).
func sampleLabels(b []byte) (values []int64, labels [][2]int64, err error) {
	fields, err := pbFields(b)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range fields {
		switch f.num {
		case pbSampleValue:
			vs, err := pbInts(f)
			if err != nil {
				return nil, nil, err
			}
			values = append(values, vs...)
		case pbSampleLabel:
			lf, err := pbFields(f.data)
			if err != nil {
				return nil, nil, err
			}
			var l [2]int64
			for _, x := range lf {
				switch x.num {
				case pbLabelKey:
					l[0] = int64(x.v)
				case pbLabelStr:
					l[1] = int64(x.v)
				}
			}
			labels = append(labels, l)
		}
	}
	return values, labels, nil
}

// profileByLabel sums the CPU time of a CPU profile, as runtime/pprof
// writes it (gzipped profile.proto), by the value of its samples' label
// key, in nanoseconds; "" gathers the samples without that label.
func profileByLabel(gz []byte, key string) (map[string]int64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errProfile, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errProfile, err)
	}
	fields, err := pbFields(raw)
	if err != nil {
		return nil, err
	}
	var strs []string
	var types []int64 // the sample types' type names, as string indices
	var samples [][]byte
	for _, f := range fields {
		switch f.num {
		case pbProfileStringTable:
			strs = append(strs, string(f.data))
		case pbProfileSample:
			samples = append(samples, f.data)
		case pbProfileSampleType:
			vt, err := pbFields(f.data)
			if err != nil {
				return nil, err
			}
			for _, x := range vt {
				if x.num == pbValueTypeType {
					types = append(types, int64(x.v))
				}
			}
		}
	}
	return sumByLabel(strs, types, samples, key)
}

// sumByLabel adds up the "cpu" value of samples by their label key.
func sumByLabel(strs []string, types []int64, samples [][]byte, key string) (map[string]int64, error) {
	str := func(i int64) string {
		if i < 0 || i >= int64(len(strs)) {
			return ""
		}
		return strs[i]
	}
	cpu := -1
	for i, t := range types {
		if str(t) == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, fmt.Errorf("%w: no cpu sample type", errProfile)
	}
	out := map[string]int64{}
	for _, s := range samples {
		values, labels, err := sampleLabels(s)
		if err != nil {
			return nil, err
		}
		if cpu >= len(values) {
			return nil, fmt.Errorf("%w: a sample without its cpu value", errProfile)
		}
		value := ""
		for _, l := range labels {
			if str(l[0]) == key {
				value = str(l[1])
			}
		}
		out[value] += values[cpu]
	}
	return out, nil
}
