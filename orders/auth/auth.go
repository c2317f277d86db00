// Package auth verifies the bearer tokens of the orders API and mints tokens
// for development.
//
// A token is a JWT (RFC 7519) signed with HMAC-SHA256 (HS256) under a shared
// secret. Verify accepts a token only when all of these hold:
//
//   - the Authorization header is exactly "Bearer <token>": the scheme is
//     matched case-insensitively (RFC 9110), then exactly one space, then a
//     token of base64url characters and dots, with no other whitespace;
//   - the header's alg is HS256 (none, HS384, HS512, RS256 and every other
//     algorithm are rejected before the signature is checked);
//   - the signature verifies under the secret;
//   - exp is present and in the future (allowing the leeway, 0 by default);
//     nbf and iat, when present, are not in the future;
//   - sub is present: 1 to MaxSubjectLen bytes of visible ASCII
//     (0x21..0x7E). It is the user id.
//
// Failures wrap ErrMissingToken (no header), ErrExpiredToken (a genuine token
// past its exp) or ErrInvalidToken (everything else), so the caller can answer
// 401 with a fitting message. The signature is checked before the claims, so a
// forged token is ErrInvalidToken even when it is also expired.
package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/request"
)

// Limits.
const (
	// MinSecretLen is the shortest accepted secret, in bytes: 256 bits,
	// the size of the HS256 key.
	MinSecretLen = 32
	// MaxSubjectLen is the longest accepted sub (user id), in bytes: the
	// order path's one user id limit, request.MaxUserIDLen.
	MaxSubjectLen = request.MaxUserIDLen
	// MaxTokenLen is the longest accepted token, in bytes.
	MaxTokenLen = 4096
	// MaxLeeway is the largest clock leeway WithLeeway accepts.
	MaxLeeway = 5 * time.Minute
	// DefaultMaxLifetime is how far in the future a token's exp may be by
	// default (see WithMaxLifetime).
	DefaultMaxLifetime = 24 * time.Hour
)

// Sentinel errors.
var (
	// ErrMissingToken: the Authorization header is empty.
	ErrMissingToken = errors.New("missing bearer token")
	// ErrInvalidToken: the header or the token is malformed, the algorithm
	// is not HS256, the signature does not verify, or a claim is missing or
	// invalid.
	ErrInvalidToken = errors.New("invalid bearer token")
	// ErrExpiredToken: the token is genuine but past its exp.
	ErrExpiredToken = errors.New("expired bearer token")
	// ErrWeakSecret: the secret is shorter than MinSecretLen.
	ErrWeakSecret = errors.New("secret too short")
	// ErrInvalidArgument: a bad option, user id or ttl.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
	cfg    config
}

// Option configures NewVerifier and Mint. A nil option is an error.
type Option func(*config) error

// errOption is what a nil option's error wraps.
var errOption = fmt.Errorf("auth: %w", ErrInvalidArgument)

type config struct {
	leeway      time.Duration
	now         func() time.Time
	issuer      string
	audience    string
	maxLifetime time.Duration
}

// WithIssuer makes Verify require the iss claim to equal iss. Mint sets it.
func WithIssuer(iss string) Option {
	return func(c *config) error {
		if iss == "" {
			return fmt.Errorf("auth: %w: empty issuer", ErrInvalidArgument)
		}
		c.issuer = iss
		return nil
	}
}

// WithAudience makes Verify require the aud claim to contain aud. Mint
// sets it.
func WithAudience(aud string) Option {
	return func(c *config) error {
		if aud == "" {
			return fmt.Errorf("auth: %w: empty audience", ErrInvalidArgument)
		}
		c.audience = aud
		return nil
	}
}

// WithMaxLifetime makes Verify refuse a token whose exp lies more than d
// (plus the leeway) in the future: a leaked long-lived token stops being
// accepted. Default DefaultMaxLifetime. Mint ignores it.
func WithMaxLifetime(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("auth: %w: max lifetime %v is not positive", ErrInvalidArgument, d)
		}
		c.maxLifetime = d
		return nil
	}
}

// WithLeeway allows exp, nbf and iat to be off by up to d, for clock skew
// between the token issuer and this service. d must be in 0..MaxLeeway.
// Mint ignores it.
func WithLeeway(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > MaxLeeway {
			return fmt.Errorf("auth: %w: leeway %v is outside 0..%v", ErrInvalidArgument, d, MaxLeeway)
		}
		c.leeway = d
		return nil
	}
}

// WithClock sets the clock used to check (Verifier) or stamp (Mint) times.
// The default is time.Now. It is meant for tests.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("auth: %w: nil clock", ErrInvalidArgument)
		}
		c.now = now
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{now: time.Now, maxLifetime: DefaultMaxLifetime}
	err := option.Apply(&c, opts, errOption)
	return c, err
}

func checkSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("auth: %w: %d bytes, want at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	return nil
}

// NewVerifier returns a Verifier for tokens signed with secret. The secret
// is copied. It fails with ErrWeakSecret when the secret is shorter than
// MinSecretLen bytes, or ErrInvalidArgument for a bad option.
func NewVerifier(secret []byte, opts ...Option) (*Verifier, error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	popts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(c.leeway),
		jwt.WithTimeFunc(c.now),
		jwt.WithStrictDecoding(),
	}
	if c.issuer != "" {
		popts = append(popts, jwt.WithIssuer(c.issuer))
	}
	if c.audience != "" {
		popts = append(popts, jwt.WithAudience(c.audience))
	}
	return &Verifier{
		secret: append([]byte(nil), secret...),
		parser: jwt.NewParser(popts...),
		cfg:    c,
	}, nil
}

// Verify checks the value of an Authorization header and returns the user id
// (the token's sub). ctx is checked for cancellation first; verification
// itself does no I/O. See the package documentation for the rules and errors.
func (v *Verifier) Verify(ctx context.Context, authorization string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	raw, err := ParseBearer(authorization)
	if err != nil {
		return "", err
	}
	var claims jwt.RegisteredClaims
	_, err = v.parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		// WithValidMethods already restricts alg; this keeps the key from
		// ever reaching another algorithm if that option is lost.
		if t.Method != jwt.SigningMethodHS256 {
			return nil, fmt.Errorf("unexpected signing method %v", t.Header["alg"])
		}
		return v.secret, nil
	})
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", fmt.Errorf("auth: %w: %v", ErrExpiredToken, err)
	default:
		return "", fmt.Errorf("auth: %w: %v", ErrInvalidToken, err)
	}
	if err := checkSubject(claims.Subject); err != nil {
		return "", fmt.Errorf("auth: %w: %v", ErrInvalidToken, err)
	}
	if limit := v.cfg.now().Add(v.cfg.maxLifetime + v.cfg.leeway); claims.ExpiresAt.After(limit) {
		return "", fmt.Errorf("auth: %w: exp is more than %v away", ErrInvalidToken, v.cfg.maxLifetime)
	}
	return claims.Subject, nil
}

// ParseBearer extracts the token from an Authorization header value of the
// form "Bearer <token>". The scheme is case-insensitive; the separator is
// exactly one space; the token is 1 to MaxTokenLen bytes of base64url
// characters and dots ([A-Za-z0-9_.-]). The empty header wraps
// ErrMissingToken; every other failure wraps ErrInvalidToken. It does not
// verify the token.
func ParseBearer(authorization string) (string, error) {
	if authorization == "" {
		return "", fmt.Errorf("auth: %w: no Authorization header", ErrMissingToken)
	}
	const scheme = "Bearer"
	if len(authorization) < len(scheme) || !strings.EqualFold(authorization[:len(scheme)], scheme) {
		return "", fmt.Errorf("auth: %w: the Authorization scheme must be Bearer", ErrInvalidToken)
	}
	rest := authorization[len(scheme):]
	if rest == "" || rest[0] != ' ' {
		return "", fmt.Errorf("auth: %w: want \"Bearer <token>\"", ErrInvalidToken)
	}
	token := rest[1:]
	switch {
	case token == "":
		return "", fmt.Errorf("auth: %w: empty token", ErrInvalidToken)
	case len(token) > MaxTokenLen:
		return "", fmt.Errorf("auth: %w: token longer than %d bytes", ErrInvalidToken, MaxTokenLen)
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("auth: %w: token has a character outside base64url and '.' at byte %d", ErrInvalidToken, i)
		}
	}
	return token, nil
}

// checkSubject applies the user id rule: 1..MaxSubjectLen bytes of visible
// ASCII.
func checkSubject(sub string) error {
	if sub == "" {
		return errors.New("sub is missing")
	}
	if len(sub) > MaxSubjectLen {
		return fmt.Errorf("sub is longer than %d bytes", MaxSubjectLen)
	}
	for i := 0; i < len(sub); i++ {
		if c := sub[i]; c < 0x21 || c > 0x7e {
			return errors.New("sub must be visible ASCII")
		}
	}
	return nil
}

// Mint returns a token for userID, signed with secret, that expires ttl from
// now (WithClock sets "now"). It carries sub, iat and exp. It is for
// development and tests: production tokens come from the identity provider.
// It fails with ErrWeakSecret for a short secret and ErrInvalidArgument for a
// user id that Verify would reject or a ttl that is not positive.
func Mint(secret []byte, userID string, ttl time.Duration, opts ...Option) (string, error) {
	if err := checkSecret(secret); err != nil {
		return "", err
	}
	if err := checkSubject(userID); err != nil {
		return "", fmt.Errorf("auth: %w: user id: %v", ErrInvalidArgument, err)
	}
	if ttl <= 0 {
		return "", fmt.Errorf("auth: %w: ttl %v is not positive", ErrInvalidArgument, ttl)
	}
	c, err := newConfig(opts)
	if err != nil {
		return "", err
	}
	now := c.now()
	claims := jwt.RegisteredClaims{
		Subject:   userID,
		Issuer:    c.issuer,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	if c.audience != "" {
		claims.Audience = jwt.ClaimStrings{c.audience}
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("auth: sign: %w", err)
	}
	return s, nil
}
