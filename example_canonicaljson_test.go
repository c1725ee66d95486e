package idem_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/idemkit/idem"
)

// Two serializations of one value, with the properties in another order,
// other whitespace and escapes, and the numbers in other forms, share one
// canonical form, and so one fingerprint. A repeated name has none.
func ExampleCanonicalJSON() {
	first, err := idem.CanonicalJSON([]byte(`{"amount":1.50,"currency":"EUR","items":[{"sku":"A-1","qty":2}]}`))
	if err != nil {
		log.Fatal(err)
	}
	retry, err := idem.CanonicalJSON([]byte(`{ "items": [ { "qty": 2e0, "sku": "A-1" } ], "currency": "\u0045UR", "amount": 15E-1 }`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", first)
	fmt.Println(idem.FingerprintRequest("POST", "/orders", first) == idem.FingerprintRequest("POST", "/orders", retry))

	_, err = idem.CanonicalJSON([]byte(`{"amount":1,"amount":2}`))
	fmt.Println(errors.Is(err, idem.ErrInvalidJSON), err)
	// Output:
	// {"amount":1.5,"currency":"EUR","items":[{"qty":2,"sku":"A-1"}]}
	// true
	// true idem: JSON cannot be canonicalized: property name "amount" occurs twice in the object at offset 0
}

// The exact form equates number texts of one value, as RFC 8785 does, but
// keeps apart numbers that differ only past float64 precision, which RFC
// 8785 equates: a second order whose 64-bit id differs in its last digit
// is another order.
func ExampleCanonicalJSONExact() {
	for _, body := range []string{
		`{"id":12345678901234567,"amount":0.10}`,
		`{ "amount": 1e-1, "id": 12345678901234567.0 }`,
		`{"id":12345678901234568,"amount":0.1}`,
	} {
		exact, err := idem.CanonicalJSONExact([]byte(body))
		if err != nil {
			log.Fatal(err)
		}
		rfc8785, err := idem.CanonicalJSON([]byte(body))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s\n", exact, rfc8785)
	}
	// Output:
	// {"amount":0.1,"id":12345678901234567} {"amount":0.1,"id":12345678901234568}
	// {"amount":0.1,"id":12345678901234567} {"amount":0.1,"id":12345678901234568}
	// {"amount":0.1,"id":12345678901234568} {"amount":0.1,"id":12345678901234568}
}
