package fakepay_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// In process, the fake provider charges once per payment request id and
// can lose the reply of a charge that went through, as a real network
// would.
func ExampleServer_Charge() {
	ctx := context.Background()
	fake, err := fakepay.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fake.Close()
	id := payment.RequestID("ord_1")
	if err := fake.LoseReplyNext(id); err != nil {
		fmt.Println(err)
		return
	}

	_, err = fake.Charge(ctx, payment.ChargeRequest{PaymentRequestID: id, OrderID: "ord_1", AmountCents: 1999})
	fmt.Println("charge:", errors.Is(err, payment.ErrTimeout))

	res, _ := fake.Query(ctx, id)
	fmt.Println("query:", res.Status)

	res, _ = fake.Charge(ctx, payment.ChargeRequest{PaymentRequestID: id, OrderID: "ord_1", AmountCents: 1999})
	fmt.Println("retry:", res.Status, "charged", fake.Charges(id), "time(s)")
	// Output:
	// charge: true
	// query: SUCCEEDED
	// retry: SUCCEEDED charged 1 time(s)
}
