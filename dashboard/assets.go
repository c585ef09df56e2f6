package dashboard

import (
	"embed"
	"net/http"
	"path"
)

//go:embed assets/static
var staticFS embed.FS

// serveAsset serves an embedded stylesheet or script.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := staticFS.ReadFile("assets/static/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".svg":
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b) // a client that went away cannot be told
}
