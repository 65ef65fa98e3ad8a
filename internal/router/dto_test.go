package router

import dto "github.com/prometheus/client_model/go"

type dtoMetricFamily = dto.MetricFamily
