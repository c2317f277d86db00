package payment_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// Every charge of an order carries the same payment request id, so a
// provider charges it once: when the reply of a charge that went through
// is lost, Query finds the charge, and charging again moves no money. The
// provider here is the HTTP fake that devtools/cmd/fakepay serves.
func ExampleNewHTTPProvider() {
	fp, err := fakepay.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fp.Close()
	srv := httptest.NewServer(fp.Handler())
	defer srv.Close()
	// A new connection per request: the transport never resends by itself.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	p, err := payment.NewHTTPProvider(srv.URL, payment.WithHTTPClient(client), payment.WithRetries(0, time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	req := payment.ChargeRequest{PaymentRequestID: payment.RequestID("ord_1"), OrderID: "ord_1", AmountCents: 1999}
	if err := fp.Inject(req.PaymentRequestID, fakepay.FaultLoseReply, 1); err != nil {
		fmt.Println(err)
		return
	}

	_, err = p.Charge(ctx, req)
	fmt.Println("charge:", errors.Is(err, payment.ErrTimeout))

	res, _ := p.Query(ctx, req.PaymentRequestID)
	fmt.Println("query:", res.Status)

	res, _ = p.Charge(ctx, req)
	fmt.Println("retry:", res.Status, "charged", fp.Stats().Charges, "time(s)")
	// Output:
	// charge: true
	// query: SUCCEEDED
	// retry: SUCCEEDED charged 1 time(s)
}
