-- Ends the lease now, keeping the work's state. A lease that ends at its
-- record's created_at is one released, not one that lapsed.
UPDATE "{{.Name}}" SET lease_until = MIN(created_at, {{template "now"}})
{{template "fenced"}}
