package idemgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idemkit/idem/idemrpc"
)

// A call's stored outcome is the body of an idem.Response with Status
// idem.NoStatus, its response header in the Response's Header. The body
// begins with a version byte:
//
//   - outcomeV2: an idemrpc.Answer: the encoded google.rpc.Status (empty
//     for OK), the trailer, the response message's protobuf encoding;
//   - outcomeV1, written before trailers were stored: the length of the
//     encoded google.rpc.Status as a uvarint, that status (empty for OK),
//     then the response message's protobuf encoding. It is still read.
const (
	outcomeV1 = 1
	outcomeV2 = 2
)

var errCorruptOutcome = errors.New("idemgrpc: stored outcome is corrupt")

// outcome is one stored answer.
type outcome struct {
	status  *spb.Status // nil: OK
	trailer metadata.MD
	message []byte
}

func (o outcome) encode() []byte {
	a := idemrpc.Answer{Trailer: headerOf(o.trailer), Message: o.message}
	if o.status != nil {
		a.Status, _ = proto.Marshal(o.status) // a google.rpc.Status made by package status always encodes
	}
	return a.Append([]byte{outcomeV2})
}

func decodeOutcome(b []byte) (outcome, error) {
	if len(b) == 0 {
		return outcome{}, fmt.Errorf("%w: empty", errCorruptOutcome)
	}
	var (
		sb []byte
		o  outcome
	)
	switch b[0] {
	case outcomeV1:
		n, w := binary.Uvarint(b[1:])
		if w <= 0 || n > uint64(len(b)-1-w) { //nolint:gosec // w > 0 and w <= len(b)-1: Uvarint read w bytes of b[1:]
			return outcome{}, fmt.Errorf("%w: bad status length", errCorruptOutcome)
		}
		rest := b[1+w:]
		sb, o.message = rest[:n], rest[n:]
	case outcomeV2:
		a, err := idemrpc.ParseAnswer(b[1:])
		if err != nil {
			return outcome{}, fmt.Errorf("%w: %w", errCorruptOutcome, err)
		}
		sb, o.trailer, o.message = a.Status, metadata.MD(a.Trailer), a.Message
	default:
		return outcome{}, fmt.Errorf("%w: unknown encoding %d", errCorruptOutcome, b[0])
	}
	if len(sb) > 0 {
		o.status = new(spb.Status)
		if err := proto.Unmarshal(sb, o.status); err != nil {
			return outcome{}, fmt.Errorf("%w: %w", errCorruptOutcome, err)
		}
	}
	return o, nil
}

// headerOf is md as idem stores a header: the same names and values.
func headerOf(md metadata.MD) map[string][]string {
	if len(md) == 0 {
		return nil
	}
	return md.Copy()
}

// newResponse returns an empty message of method's response type, found in
// the global protobuf registry (generated code registers every .proto file
// it is built from). For a method the registry does not know it returns a
// carrier: an empty message whose unknown fields will hold the stored bytes,
// so the client still receives exactly those bytes and decodes them into
// its own response type.
func newResponse(method string) proto.Message {
	service, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if ok {
		if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service)); err == nil {
			if sd, isService := d.(protoreflect.ServiceDescriptor); isService {
				if md := sd.Methods().ByName(protoreflect.Name(name)); md != nil {
					if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName()); err == nil {
						return mt.New().Interface()
					}
				}
			}
		}
	}
	return &emptypb.Empty{}
}
