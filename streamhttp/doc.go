// Package streamhttp serves an MCP server over the Streamable HTTP
// transport of revision 2026-07-28, as an http.Handler.
//
// Every message is its own POST. A request is answered with one JSON body,
// or — as soon as the server has something to say before the response
// (progress, a log line, a listen's acknowledgement) — with an SSE stream
// for that request alone. The handler is secure by default: it checks the
// Host and Origin headers against loopback unless told otherwise (DNS
// rebinding defence), bounds body size and JSON nesting, and validates the
// MCP-Protocol-Version, Mcp-Method, Mcp-Name and Mcp-Param-* headers
// against the body before any handler runs.
//
// # Serving it
//
// Every write of an answer, a stream's events and a plain JSON body alike,
// is bounded by [WithWriteTimeout], and a long body is written in pieces
// of 64 KiB, each under it: a client that stops reading is cut off and
// the answer's memory freed, while one that reads slowly gets it all. The
// connection is the http.Server's to bound: set ReadHeaderTimeout and
// IdleTimeout, bound the time a request body may take with
// [http.ResponseController.SetReadDeadline] in a handler around this
// one (lifted once the body is read: the connection is then read only to
// notice the client leave), and cap the connections a client may open.
// Leave ReadTimeout and WriteTimeout unset, or longer than a listen is to
// last: they bound a whole exchange, and would cut a stream short. A body
// cut by a read deadline is answered with 408 Request Timeout. tidings
// serve does all of this; see its --max-conns-per-addr, --max-conns,
// --idle-timeout, --header-timeout, --body-timeout and --write-timeout.
//
// # Behind a proxy
//
// A streamed answer is one long HTTP response, and a listen may last for
// hours. A proxy in front of the handler must pass events on as they
// come, leave the upstream connection open while the answer lasts, and
// leave the request body alone once the answer has begun.
//
// With [net/http/httputil.ReverseProxy], run the proxy from a handler that
// enables full duplex:
//
//	proxy := &httputil.ReverseProxy{
//		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(upstream) },
//		FlushInterval: -1,
//	}
//	http.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		// HTTP/2 always is full duplex, and says so with ErrNotSupported.
//		_ = http.NewResponseController(w).EnableFullDuplex()
//		proxy.ServeHTTP(w, r)
//	}))
//
// Without full duplex, an HTTP/1 proxy now and then cuts an answer
// short: the client sees a 200 with no result, or a stream ended
// mid-event, and the proxy logs "ReverseProxy read error during body
// copy: use of closed network connection". net/http's server closes a
// request's body once its handler starts the response; the proxy's
// Transport, after copying the body upstream, reads it once more to check
// its length. This handler answers as soon as it has the body, so its
// response can reach the proxy first; that last read then fails, and the
// Transport closes the upstream connection under the answer being copied.
// Reading the whole request body before calling the proxy (through
// [http.MaxBytesReader], then a bytes.Reader as r.Body) avoids it too.
//
// The rest of a proxy's set-up:
//   - FlushInterval -1 passes every write on at once; ReverseProxy does so
//     for text/event-stream in any case.
//   - The proxy's http.Server: no WriteTimeout, or one longer than a
//     listen is to last.
//   - Its Transport: a ResponseHeaderTimeout, if any, longer than the
//     slowest call that sends nothing before its result (the headers go
//     out with the first message), and MaxIdleConnsPerHost near the number
//     of requests in flight (http.DefaultTransport keeps 2 per host).
//   - Host and Origin: SetURL sends the upstream's own host; a proxy that
//     keeps the client's needs [WithAllowedHosts], and browser clients need
//     [WithAllowedOrigins], since the Origin header passes through.
//   - Connections per client address: behind a proxy every connection
//     comes from the proxy's address, so a cap on connections per address
//     in front of the handler (tidings serve's --max-conns-per-addr, 256
//     by default) must be raised above the connections the proxy opens
//     upstream, or disabled (--max-conns-per-addr 0) and the clients
//     bounded at the proxy instead. The cap on connections in all
//     (--max-conns) still holds.
//
// With nginx, which reads a whole request body before it goes upstream
// (proxy_request_buffering, on by default) and so is clear of the above:
//
//	upstream mcp {
//		server 127.0.0.1:8080;
//		keepalive 16;
//	}
//	location /mcp {
//		proxy_pass http://mcp;
//		proxy_http_version 1.1;
//		proxy_set_header Connection "";
//		proxy_set_header Host $host;
//		proxy_buffering off;
//		proxy_read_timeout 1h;
//	}
//
// HTTP/1.1 with an empty Connection header keeps upstream connections
// alive; $host is the client's Host, which [WithAllowedHosts] must name
// unless it is loopback; proxy_buffering off passes events on as they come (the handler
// also sends X-Accel-Buffering: no); proxy_read_timeout must be longer
// than twice the keep-alive interval of [server.WithKeepAlive] (an idle
// listen hears something within twice it) and than the slowest call that
// sends nothing before its result.
//
// # Parked listens
//
// Under [Serve] or [ListenAndServe] (unless [WithoutParking]), or with
// [WithParking] under any server, a 2026-07-28 listen over plain
// HTTP/1.1 on Linux leaves net/http once its headers and acknowledgement are written: the
// handler hijacks the connection and parks it. One epoll poller per
// handler watches every parked socket for its client leaving, a few writers (GOMAXPROCS) write
// each change to the sockets whose subscriptions it reaches, without
// blocking, and one ticker sends keep-alives and cuts readers stuck past
// the write timeout. A parked listen holds no goroutine and none of
// net/http's buffers: a few kilobytes in all. What a socket cannot take
// at once waits, at most one drain of its filter, for the poller to say
// it has room; the changes after it wait in the hub, merged.
//
// A parked listen ends with the server's [server.Server.Shutdown] (its
// complete result, as any listen), its client leaving, or the write
// timeout; the http.Server no longer tracks its connection (ConnState
// reports it hijacked), so its Shutdown and Close do not end it, and
// neither does cancelling the request's context in a handler around
// this one. Shut the server down before the http.Server. A
// net.Listener wrapper whose connections are not syscall.Conn keeps the
// listen on its goroutine, written to the connection directly; so do
// TLS connections over HTTP/1.1, HTTP/2 served by net/http, listens
// that follow tasks (their state is read as changes come) and
// 2025-11-25 session streams. Served by net/http alone without
// WithParking, every listen keeps its goroutine. Serve ends the listens
// of the servers whose Handlers it served when its context ends, before
// it closes the connections, so that a program using it need not order
// the two shutdowns itself.
//
// Over HTTP/2 served by tidings' own server (internal/h2, as tidings
// serve has it), with or without TLS and on any platform, a listen is
// parked on its stream instead: the handler returns, and the
// connection's one writer drains the listen's subscription when it
// notifies, so that a change to many listens of one connection leaves
// in one write. A stream whose client gives it no flow-control window
// for the write timeout is reset; the server's Shutdown ends the
// listen with its result, and the http.Server's Shutdown sends a
// GOAWAY and closes the connection once its streams have ended.
//
// # Options
//
// An option that takes a size, a count or a duration keeps its default
// for a value of zero or less: a bound is never turned off by a zero
// left unset.
package streamhttp
