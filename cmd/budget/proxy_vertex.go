package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/tokenbudget/tokenbudget/budget"
)

// cloudPlatformScope is the OAuth scope Vertex AI's calls need.
const cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// googleTokens is a vertex upstream's credential: key, an access token
// from --upstream-key-env (sent as it is; gcloud's last an hour), else
// Google application default credentials: the JSON file
// $GOOGLE_APPLICATION_CREDENTIALS names (a service account key, a user's
// gcloud login, workload identity federation), else gcloud's well-known
// file, else the metadata server on Google Cloud. Its token source fetches
// a token at the first request and refreshes it before it expires.
func (m *Main) googleTokens(ctx context.Context, key string) (oauth2.TokenSource, error) {
	if key != "" {
		return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: key, TokenType: "Bearer"}), nil
	}
	// Token fetches outlive the start-up: they follow the process, not ctx.
	ctx = context.WithoutCancel(ctx)
	path := m.Getenv("GOOGLE_APPLICATION_CREDENTIALS")
	if path == "" {
		creds, err := google.FindDefaultCredentials(ctx, cloudPlatformScope)
		if err != nil {
			return nil, fmt.Errorf("no Google application default credentials (set GOOGLE_APPLICATION_CREDENTIALS or run 'gcloud auth application-default login'): %w", err)
		}
		return creds.TokenSource, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("GOOGLE_APPLICATION_CREDENTIALS: %w", err)
	}
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &f); err != nil || f.Type == "" {
		return nil, budget.Invalid("GOOGLE_APPLICATION_CREDENTIALS", path, "want a Google credentials JSON file with a \"type\"")
	}
	creds, err := google.CredentialsFromJSONWithType(ctx, data, google.CredentialsType(f.Type), cloudPlatformScope)
	if err != nil {
		return nil, fmt.Errorf("GOOGLE_APPLICATION_CREDENTIALS %s: %w", path, err)
	}
	return creds.TokenSource, nil
}
