package dashboard_test

import (
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/dashboard"
)

// The dashboard mounted under /admin/redq behind the application's own
// authentication, with actions enabled.
func ExampleNew() {
	m, err := miniredis.Run() // stands for your Redis
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()

	// readme:start
	insp, err := redq.NewInspector(client, redq.WithNamespace("shop"))
	if err != nil {
		log.Fatal(err)
	}
	dash, err := dashboard.New(insp, dashboard.Options{
		PathPrefix:    "/admin/redq",
		EnableActions: true, // retry, delete, purge, pause... (CSRF-protected POSTs)
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/redq/", requireUser("ops", "s3cret", dash))
	// readme:end

	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, password := range []string{"guess", "s3cret"} {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/redq/", nil)
		req.SetBasicAuth("ops", password)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(password, res.Status)
	}
	// Output:
	// guess 401 Unauthorized
	// s3cret 200 OK
}

// requireUser stands for the application's authentication middleware.
func requireUser(user, password string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u+":"+p), []byte(user+":"+password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="redq"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
