package idemgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A call's stored outcome is the body of an idem.Response with Status
// idem.NoStatus: a version byte, the length of the encoded google.rpc.Status
// as a uvarint, that status (empty for OK), then the response message's
// protobuf encoding (empty unless OK).
const outcomeV1 = 1

var errCorruptOutcome = errors.New("idemgrpc: stored outcome is corrupt")

func encodeOutcome(st *spb.Status, resp []byte) []byte {
	var sb []byte
	if st != nil {
		sb, _ = proto.Marshal(st) // a google.rpc.Status made by package status always encodes
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(sb)+len(resp))
	b = append(b, outcomeV1)
	b = binary.AppendUvarint(b, uint64(len(sb)))
	b = append(b, sb...)
	return append(b, resp...)
}

// decodeOutcome returns the stored status (nil for OK) and response bytes.
func decodeOutcome(b []byte) (*spb.Status, []byte, error) {
	if len(b) == 0 || b[0] != outcomeV1 {
		return nil, nil, fmt.Errorf("%w: unknown encoding", errCorruptOutcome)
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) { //nolint:gosec // w > 0 and w <= len(b)-1: Uvarint read w bytes of b[1:]
		return nil, nil, fmt.Errorf("%w: bad status length", errCorruptOutcome)
	}
	rest := b[1+w:]
	if n == 0 {
		return nil, rest, nil
	}
	st := new(spb.Status)
	if err := proto.Unmarshal(rest[:n], st); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errCorruptOutcome, err)
	}
	return st, rest[n:], nil
}

// replay turns a stored outcome back into the handler's answer: the stored
// status as an error, or a response message decoded from the stored bytes.
func replay(method string, body []byte) (any, error) {
	st, resp, err := decodeOutcome(body)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the stored answer of this call cannot be read: %v", err)
	}
	if st != nil {
		return nil, status.ErrorProto(st)
	}
	m := newResponse(method)
	if err := proto.Unmarshal(resp, m); err != nil {
		return nil, status.Errorf(codes.Internal, "the stored answer of this call does not decode as %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return m, nil
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
