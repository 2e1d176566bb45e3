#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
