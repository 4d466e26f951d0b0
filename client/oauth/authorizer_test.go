package oauth_test

import (
	"tidings/client"
	"tidings/client/oauth"
)

// A Flow is what package client takes as its Authorizer.
var _ client.Authorizer = (*oauth.Flow)(nil)
