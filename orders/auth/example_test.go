package auth_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
)

func ExampleVerifier_Verify() {
	secret := []byte("a-dev-secret-of-at-least-32-bytes")
	v, err := auth.NewVerifier(secret, auth.WithLeeway(5*time.Second))
	if err != nil {
		panic(err)
	}
	tok, err := auth.Mint(secret, "u1001", time.Hour)
	if err != nil {
		panic(err)
	}
	user, err := v.Verify(context.Background(), "Bearer "+tok)
	fmt.Println(user, err)

	_, err = v.Verify(context.Background(), "")
	fmt.Println(errors.Is(err, auth.ErrMissingToken))
	_, err = v.Verify(context.Background(), "Bearer not.a.token")
	fmt.Println(errors.Is(err, auth.ErrInvalidToken))
	// Output:
	// u1001 <nil>
	// true
	// true
}

func ExampleMint() {
	secret := []byte("a-dev-secret-of-at-least-32-bytes")
	at := func() time.Time { return time.Unix(1_800_000_000, 0) }
	tok, _ := auth.Mint(secret, "u1001", 15*time.Minute, auth.WithClock(at))
	fmt.Println(tok)
	// Output:
	// eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1MTAwMSIsImV4cCI6MTgwMDAwMDkwMCwiaWF0IjoxODAwMDAwMDAwfQ.YjsF_bU_XcJPZD0QXPEDxyQdMjAjWhWQeVFw7Btw-2k
}
