package azure_test

import "net/http"

type httpClient struct{}

func (httpClient) get(u string) (int, error) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
