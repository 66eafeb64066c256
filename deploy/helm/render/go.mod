module gatehouse/deploy/helm/render

go 1.19
