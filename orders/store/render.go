package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
)

// OutOfStock describes a rejected PlaceOrder, for rendering its saved
// response.
type OutOfStock struct {
	UserID         string
	IdempotencyKey string
	ProductID      string
	Quantity       int64
}

// createdBody is the default 201 body: the fields the HTTP contract names,
// in a fixed order, so a replay is byte-identical.
type createdBody struct {
	OrderID   string `json:"orderId"`
	Status    Status `json:"status"`
	ProductID string `json:"productId"`
	Quantity  int64  `json:"quantity"`
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// DefaultRender renders a new order as 201 Created with the body
// {"orderId", "status", "productId", "quantity"}. It is used when
// PlaceOrder.Render is nil.
func DefaultRender(o Order) (int, []byte) {
	b, err := json.Marshal(createdBody{OrderID: o.ID, Status: o.Status, ProductID: o.ProductID, Quantity: o.Quantity})
	if err != nil {
		// Strings and integers always marshal.
		panic(err)
	}
	return http.StatusCreated, b
}

// DefaultRenderOutOfStock renders a rejection as 409 Conflict with an
// RFC 9457 problem body (to be served as application/problem+json). It is
// used when PlaceOrder.RenderOutOfStock is nil.
func DefaultRenderOutOfStock(r OutOfStock) (int, []byte) {
	b, err := json.Marshal(problem{
		Type:   "/problems/out-of-stock",
		Title:  "Out of stock",
		Status: http.StatusConflict,
		Detail: fmt.Sprintf("product %s has fewer than %d units available", r.ProductID, r.Quantity),
	})
	if err != nil {
		panic(err)
	}
	return http.StatusConflict, b
}

// NewOrderID returns a random order id: "ord_" followed by 128 random bits
// in hex.
func NewOrderID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: order id: %w", err)
	}
	return "ord_" + hex.EncodeToString(b[:]), nil
}
