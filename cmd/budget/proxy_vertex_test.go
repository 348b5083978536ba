package main

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// googleTokenServer is an OAuth token endpoint for a service account: it
// answers a JWT-bearer grant whose assertion the account's key signed
// (RS256, iss the account, aud the endpoint, the cloud-platform scope)
// with token, and counts the grants.
func googleTokenServer(t *testing.T, pub *rsa.PublicKey, email, token string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var grants atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(why string) {
			t.Errorf("token endpoint: %s", why)
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		}
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.URL.Path != "/token" {
			fail("not a form POST to /token")
			return
		}
		if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			fail("grant_type " + g)
			return
		}
		parts := strings.Split(r.PostForm.Get("assertion"), ".")
		if len(parts) != 3 {
			fail("assertion is no JWT")
			return
		}
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if err != nil || rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil {
			fail("assertion not signed by the service account's key")
			return
		}
		raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
		var claims struct {
			Iss, Aud, Scope string
		}
		if json.Unmarshal(raw, &claims) != nil || claims.Iss != email || claims.Aud != srv.URL+"/token" ||
			!strings.Contains(claims.Scope, "https://www.googleapis.com/auth/cloud-platform") {
			fail("claims " + string(raw))
			return
		}
		grants.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": 3600})
	}))
	t.Cleanup(srv.Close)
	return srv, &grants
}

// TestProxyVertexADC: an upstream vertex=URL authenticates with Google
// application default credentials: a service account's key file
// (GOOGLE_APPLICATION_CREDENTIALS) whose token_uri is a loopback token
// endpoint, so the proxy signs a JWT grant, gets a real access token and
// sends it as the bearer token of each Vertex AI call (fetched once,
// reused). Vertex's publisher paths route there, the client's query
// reaches the upstream as sent ($alt=json;enum-encoding=int, raw or
// escaped) without the gateway key= parameter, and the recorded Vertex
// answers (a body, a JSON-array stream with integer enums) are metered
// exactly under the provider vertex.
func TestProxyVertexADC(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	const email, token = "budget-proxy@test-project.iam.gserviceaccount.com", "ya29.vertex-test-token"
	tokens, grants := googleTokenServer(t, &key.PublicKey, email, token)
	sa, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "test-project", "private_key_id": "k1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "client_email": email,
		"client_id": "1", "token_uri": tokens.URL + "/token"})
	saPath := filepath.Join(t.TempDir(), "service-account.json")
	if err := os.WriteFile(saPath, sa, 0o600); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var queries []string
	vertex := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer "+token {
			t.Errorf("%s: Authorization %q; want the service account's access token", r.URL.Path, got)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		file := "vertex-generatecontent-json-2.json"
		if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
			file = "vertex-generatecontent-stream-2.json"
		}
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "captures", "providers", file))
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(data)
	}))
	defer vertex.Close()

	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": saPath},
		"proxy", "--db", db, "--listen", "127.0.0.1:0", "--upstream", "vertex="+vertex.URL)
	base := listenURL(t, line)

	const model = "/v1beta1/projects/test-project/locations/us-central1/publishers/google/models/gemini-2.5-flash"
	const body = `{"contents":[{"role":"user","parts":[{"text":"Tell me a joke"}]}],"generationConfig":{"maxOutputTokens":1000}}`
	for _, r := range []struct {
		path   string
		header []string
	}{
		{model + ":generateContent?$alt=json;enum-encoding=int", []string{"Authorization", "Bearer " + secret}},
		{model + ":streamGenerateContent?%24alt=json%3Benum-encoding%3Dint&key=" + secret, nil},
	} {
		if code, answer := call(t, http.MethodPost, base+r.path, body, r.header...); code != http.StatusOK {
			t.Fatalf("%s: %d %s", r.path, code, answer)
		}
	}
	// Gemini's own paths are not this upstream's.
	if code, _ := call(t, http.MethodPost, base+"/v1beta/models/gemini-2.5-flash:generateContent", body, "Authorization", "Bearer "+secret); code != http.StatusNotFound {
		t.Errorf("a Gemini API path with only a vertex upstream: %d; want 404", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"$alt=json;enum-encoding=int", "%24alt=json%3Benum-encoding%3Dint"}; strings.Join(queries, " ") != strings.Join(want, " ") {
		t.Errorf("upstream queries %q; want %q (as the client sent them, no key=)", queries, want)
	}
	if n := grants.Load(); n != 1 {
		t.Errorf("%d token grants; want 1 (the token is reused until it expires)", n)
	}
	rows := decode(t, mustRun(t, 0, "report", "--db", db, "--by", "provider", "--until", "2100-01-01", "--format", "json").stdout)["rows"].([]any)
	if len(rows) != 1 {
		t.Fatalf("report rows %v; want vertex alone", rows)
	}
	row := rows[0].(map[string]any)
	got := [4]any{row["provider"], row["input"], row["output"], row["reasoning"]}
	if want := [4]any{"vertex", 11.0 + 11, 17.0 + 16, 190.0 + 232}; got != want {
		t.Errorf("vertex usage (provider, input, output, reasoning) %v; want %v", got, want)
	}
	// A credentials file that is not there stops the proxy at start-up,
	// naming the variable.
	missing := filepath.Join(t.TempDir(), "missing.json")
	m := &Main{Stdout: io.Discard, Stderr: io.Discard, Now: func() time.Time { return testNow },
		Getenv: func(k string) string { return map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": missing}[k] }}
	err = m.Run(context.Background(), []string{"proxy", "--db", tempDB(t), "--listen", "127.0.0.1:0", "--upstream", "vertex=" + vertex.URL})
	if err == nil || !strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS") || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("a missing credentials file: %v; want an error naming GOOGLE_APPLICATION_CREDENTIALS and the file", err)
	}
}
