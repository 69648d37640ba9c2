"""Who is calling: API keys, Cloudflare Access and OIDC tokens, decided in one place
(``authenticate.Authenticator``) for every door."""
