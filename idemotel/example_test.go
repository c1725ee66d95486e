package idemotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/sqlite"
)

// The Observer goes into the store's Config; its metrics reach whatever
// reader or exporter the MeterProvider has (here an in-memory one).
func ExampleNew() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		log.Fatal(err)
	}
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	driver, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idem.New(driver, idem.Config{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	req := idem.Request{Scope: "tenant-1 POST /orders", Key: "k1", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	for range 3 {
		if _, err := store.Do(ctx, req, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 201}, nil
		}); err != nil {
			log.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "idem.claims" {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := p.Attributes.Value(idemotel.AttrOutcome)
			fmt.Println(outcome.AsString(), p.Value)
		}
	}
	// Unordered output:
	// won 1
	// replay 2
}
