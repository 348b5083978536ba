package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// bedrockSigningName is the SigV4 service name of bedrock-runtime.
const bedrockSigningName = "bedrock"

// regionOf is the region of a bedrock-runtime host
// (bedrock-runtime.us-east-1.amazonaws.com, or a FIPS or VPC endpoint
// holding the region as a label), "" when it names none.
func regionOf(host string) string {
	labels := strings.Split(strings.ToLower(host), ".")
	for i, l := range labels {
		if strings.HasPrefix(l, "bedrock-runtime") && i+1 < len(labels) && strings.Count(labels[i+1], "-") >= 2 {
			return labels[i+1]
		}
	}
	return ""
}

// signingTransport signs each Bedrock request with SigV4 over its final
// bytes, after the gateway key was stripped and the upstream URL set: what
// the upstream verifies is what goes on the wire.
type signingTransport struct {
	rt     http.RoundTripper
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	now    func() time.Time
}

func (t *signingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	info, ok := InfoFrom(req.Context())
	if !ok || (info.Route.Format != BedrockConverse && info.Route.Format != BedrockInvoke) {
		return t.rt.RoundTrip(req)
	}
	body := []byte{}
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("proxy: read the Bedrock request body to sign it: %w", err)
		}
		body, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("proxy: read the Bedrock request body to sign it: %w", err)
		}
	} else if req.Body != nil && req.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, fmt.Errorf("proxy: read the Bedrock request body to sign it: %w", err)
		}
		req.Body.Close()
	}
	creds, err := t.creds.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("proxy: AWS credentials for Bedrock: %w", err)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	// A client's own signature headers would be signed over, or clash.
	for _, h := range []string{"X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256", "Authorization"} {
		out.Header.Del(h)
	}
	sum := sha256.Sum256(body)
	if err := t.signer.SignHTTP(req.Context(), creds, out, hex.EncodeToString(sum[:]), bedrockSigningName, t.region, t.now()); err != nil {
		return nil, fmt.Errorf("proxy: sign the Bedrock request: %w", err)
	}
	return t.rt.RoundTrip(out)
}
