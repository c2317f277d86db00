package request

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Line is one product of an order and its quantity.
type Line struct {
	// ProductID is the product, always in string form ("42").
	ProductID string
	// Quantity is the number of units, MinQuantity..MaxQuantity.
	Quantity int
}

// Lines returns the order's lines: a cart's Items, or the one line of a
// single-product order.
func (o Order) Lines() []Line {
	if o.Items != nil {
		return o.Items
	}
	return []Line{{ProductID: o.ProductID, Quantity: o.Quantity}}
}

// IsCart reports whether the order is a cart of two or more products.
func (o Order) IsCart() bool { return o.Items != nil }

// Units returns the units of every line together.
func (o Order) Units() int {
	n := 0
	for _, l := range o.Lines() {
		n += l.Quantity
	}
	return n
}

// itemField names line i's field in errors: "items[2].quantity".
func itemField(i int) string { return FieldItems + "[" + strconv.Itoa(i) + "]." }

// validateCart checks a cart built in code: no single-product fields, 2 to
// MaxItems valid lines, sorted by product id and one per product, the form
// Parse returns.
func validateCart(o Order) error {
	switch {
	case o.ProductID != "" || o.Quantity != 0:
		return errf(ErrInvalidField, FieldItems, "cannot be combined with %s and %s", FieldProductID, FieldQuantity)
	case len(o.Items) < 2 || len(o.Items) > MaxItems:
		return errf(ErrInvalidField, FieldItems, "a cart holds 2 to %d distinct products (one line is a single-product order)", MaxItems)
	}
	for i, l := range o.Items {
		if err := validateLine(itemField(i), l); err != nil {
			return err
		}
		if i > 0 && o.Items[i-1].ProductID >= l.ProductID {
			return errf(ErrInvalidField, FieldItems, "lines must be sorted by product id, one per product")
		}
	}
	return nil
}

// lineFields are a line's field names, by index.
var lineFields = []string{FieldProductID, FieldQuantity}

// parseCart reads the items field: a JSON array of 1 to MaxItems lines,
// each an object with productId and quantity (unknown fields ignored, as
// at the top level). The lines are sorted by product id; a line given
// twice counts once, and a product given twice with different quantities
// is refused, since which one was meant is unknown. A cart of one product
// is returned as the single-product order it is.
func parseCart(raw []json.RawMessage) (Order, error) {
	if !isNull(raw[idxProductID]) || !isNull(raw[idxQuantity]) {
		return Order{}, errf(ErrInvalidField, FieldItems, "cannot be combined with %s and %s", FieldProductID, FieldQuantity)
	}
	var elems []json.RawMessage
	if v := bytes.TrimSpace(raw[idxItems]); len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &elems) != nil {
		return Order{}, errf(ErrInvalidField, FieldItems, "must be an array of lines")
	}
	if len(elems) == 0 || len(elems) > MaxItems {
		return Order{}, errf(ErrInvalidField, FieldItems, "must hold 1 to %d lines", MaxItems)
	}
	lines := make([]Line, 0, len(elems))
	for i, e := range elems {
		f, err := scanObject(e, itemField(i), lineFields)
		if err != nil {
			return Order{}, err
		}
		l, err := parseLine(itemField(i), f[0], f[1])
		if err != nil {
			return Order{}, err
		}
		if j := slices.IndexFunc(lines, func(m Line) bool { return m.ProductID == l.ProductID }); j >= 0 {
			if lines[j].Quantity != l.Quantity {
				return Order{}, errf(ErrInvalidField, itemField(i)+FieldQuantity,
					"product %q is also on an earlier line with quantity %d", l.ProductID, lines[j].Quantity)
			}
			continue // the same line twice: merged
		}
		lines = append(lines, l)
	}
	if len(lines) == 1 {
		return Order{ProductID: lines[0].ProductID, Quantity: lines[0].Quantity}, nil
	}
	slices.SortFunc(lines, func(a, b Line) int { return strings.Compare(a.ProductID, b.ProductID) })
	return Order{Items: lines}, nil
}

// appendLine appends a line's canonical fields: "productId":"42","quantity":1.
func appendLine(b []byte, l Line) []byte {
	b = append(b, `"productId":`...)
	b = appendString(b, l.ProductID)
	b = append(b, `,"quantity":`...)
	return strconv.AppendInt(b, int64(l.Quantity), 10)
}

// appendItems opens a cart's canonical form: {"items":[{...},{...}].
func appendItems(b []byte, items []Line) []byte {
	b = append(b, `{"items":[`...)
	for i, l := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendLine(b, l)
		b = append(b, '}')
	}
	return append(b, ']')
}
