package proxy

import (
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Defaults of the estimate (see RequestInfo.Estimate).
const (
	// DefaultMaxOutput is the output estimate of a request that sets no
	// max_tokens, max_completion_tokens or max_output_tokens.
	DefaultMaxOutput = 4096
	// DefaultImageTokens is the fixed cost of one image or file part.
	DefaultImageTokens = 1000
	// MessageTokens is the fixed overhead of one message (role, framing).
	MessageTokens = wire.MessageTokens
	// BytesPerToken is the text bytes counted as one prompt token.
	BytesPerToken = wire.BytesPerToken
)

// RequestInfo is what the middleware reads from a request body: the model,
// the stream flags, the output cap (MaxOutput, HasCap), the choices, the
// counts the input estimate is made of, the end user the body names and
// the service tier. Its Estimate method is the estimate:
//
//	input  = ceil(text bytes / 4) + 4 per message + imageTokens per image or
//	         file part + 1 per token id of a pre-tokenized embeddings input
//	output = the request's cap (times n or candidateCount), else
//	         defaultMaxOutput; none for embeddings
//
// Text bytes are the bytes of every JSON string value in the prompt fields
// plus the raw JSON of the tool definitions, which providers bill as
// prompt too; an image, audio or file part costs a fixed number of tokens.
type RequestInfo = wire.RequestInfo

// ParseRequest reads a request body of format f, as its API names things:
// its model, stream flags, output cap, end user and the counts
// RequestInfo.Estimate is made of. A body that is not a JSON object is an
// error; fields of an unexpected type are ignored.
func ParseRequest(f Format, body []byte) (RequestInfo, error) {
	return parseRequest(adapterOf(f), body)
}

// parseRequest is ParseRequest by a route's adapter: the top level is
// found in one scan, validated once, then read by the adapter.
func parseRequest(a wire.Adapter, body []byte) (RequestInfo, error) {
	var r wire.Request
	if err := r.Parse(body); err != nil {
		return RequestInfo{}, err
	}
	ri := RequestInfo{Choices: 1}
	a.Request(&r, body, &ri)
	return ri, nil
}
