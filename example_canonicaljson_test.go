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
