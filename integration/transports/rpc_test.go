package transports

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The RPC transports (gRPC, Connect) share a service described by hand
// and registered as generated code would be: transports.Orders, whose
// Create (routeOrders) and Refund (routeRefunds) take and return a
// google.protobuf.Struct. A request's path value, query and fields are
// the message's fields.

const rpcService = "transports.Orders"

var rpcMethods = routeTemplates{routeOrders: "/" + rpcService + "/Create", routeRefunds: "/" + rpcService + "/Refund"}

// rpcSchemas are the methods' descriptors, by route.
var rpcSchemas = func() map[string]protoreflect.MethodDescriptor {
	method := func(name string) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name),
			InputType: proto.String(".google.protobuf.Struct"), OutputType: proto.String(".google.protobuf.Struct")}
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("transports/orders.proto"),
		Package:    proto.String("transports"),
		Dependency: []string{"google/protobuf/struct.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{method("Create"), method("Refund")},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic(err)
	}
	m := f.Services().Get(0).Methods()
	return map[string]protoreflect.MethodDescriptor{routeOrders: m.ByName("Create"), routeRefunds: m.ByName("Refund")}
}()

// Layers of the RPC stacks.
const (
	layerInspect = "inspect" // an interceptor that reads the request message before idem
)

var rpcVocabulary = vocabulary{
	status: func(a answer) string {
		switch a {
		case answerConflict:
			return codes.AlreadyExists.String()
		case answerUnavailable:
			return codes.Unavailable.String()
		default:
			return codes.OK.String()
		}
	},
	failed:   codes.Unknown.String(),
	aborted:  codes.Internal.String(),
	panicked: []string{codes.Internal.String(), codes.Unknown.String()},
	mismatch: "IDEMPOTENCY_KEY_MISMATCH",
	bodyless: func(a answer) bool { return a == answerConflict || a == answerUnavailable },
}

func rpcFeatures(stack []string) features {
	faults := []string{faultNone, faultNone, faultNone, faultFail, faultRetry, faultFailed, faultSlow, faultHangup}
	if slices.Contains(stack, layerRecoverer) {
		faults = append(faults, faultPanic) // without one, a panic ends the server
	}
	return features{
		kinds:  []string{kindJSON, kindEmpty},
		users:  []string{"alice", "bob"},
		styles: []string{styleWrite},
		routes: []string{routeOrders, routeRefunds},
		faults: faults,
	}
}

// rpcMessage is the request's message: its path value, query and fields.
func rpcMessage(r request) *structpb.Struct {
	m := map[string]any{}
	if r.ID != "" {
		m["id"] = r.ID
	}
	if r.Query != "" {
		m["query"] = r.Query
	}
	for _, f := range r.Fields {
		m[f.Name] = f.Value
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// rpcWire is the message's deterministic encoding, which the adapters
// fingerprint: the same fields in another order are the same request.
func rpcWire(r request) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rpcMessage(r))
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%s %x", rpcMethods.get(r.Route), b)
}

// rpcView is the message as the handler sees it.
func (h *harness) rpcView(ctx context.Context, route string, msg *structpb.Struct) string {
	m := msg.AsMap()
	id, _ := m["id"].(string)
	delete(m, "id")
	b, _ := json.Marshal(m)
	return h.view(principalOf(ctx), route, id, nil, "msg:"+string(b))
}

// rpcAnswer is the handler's answer message.
func rpcAnswer(body []byte) *structpb.Struct {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	s, _ := structpb.NewStruct(m)
	return s
}

// rpcBody is a response message as the outcome's body.
func rpcBody(m proto.Message) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	var s structpb.Struct
	if proto.Unmarshal(b, &s) == nil {
		j, _ := json.Marshal(s.AsMap())
		return string(j)
	}
	return fmt.Sprintf("%x", b)
}

// calls counts the calls a server is still serving, so that a step whose
// client hung up ends only when the server is done with it.
type calls struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

func (c *calls) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
}

func (c *calls) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.idle)
	}
}

// wait waits until no call is served (or 5s pass).
func (c *calls) wait() {
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-time.After(5 * time.Second):
	}
}
