/*
 * Kafka-protocol cluster for tests and `make up`: librdkafka's mock cluster
 * (rdkafka_mock.h) on loopback, driven over stdin.
 *
 *   mock-cluster [--brokers N] [--detach] [topic:partitions ...]
 *
 * Creates the cluster and the listed topics, prints one line
 * `bootstrap <host:port,...>` on stdout, then reads commands from stdin:
 *
 *   down <broker-id>                   disconnect a broker and refuse connections
 *   up <broker-id>                     accept connections again
 *   leader <topic> <partition> <id>    move a partition's leadership
 *   topic <name> <partitions>          create a topic
 *   request-errors <api-key> <code>... fail the next requests of that API (0 = Produce,
 *                                      1 = Fetch, 8 = OffsetCommit ...) with these
 *                                      Kafka error codes, one request each
 *   quit                               destroy the cluster and exit
 *
 * Each command is answered `ok` or `error <reason>`. End of stdin is `quit`,
 * so the cluster never outlives the process that started it; on Linux the
 * parent's death also kills it (PR_SET_PDEATHSIG). With --detach (used by
 * `make up`, whose launcher exits) stdin is ignored and the cluster runs
 * until SIGTERM or SIGINT.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static int create_topic(rd_kafka_mock_cluster_t *mc, const char *name, int partitions, int brokers) {
  int replication = brokers < 3 ? brokers : 3;
  rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, name, partitions, replication);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    fprintf(stderr, "mock-cluster: cannot create topic %s: %s\n", name, rd_kafka_err2str(err));
    return -1;
  }
  return 0;
}

/* `name:partitions` */
static int create_topic_spec(rd_kafka_mock_cluster_t *mc, const char *spec, int brokers) {
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec) {
    fprintf(stderr, "mock-cluster: topic spec must be name:partitions, got \"%s\"\n", spec);
    return -1;
  }
  int partitions = atoi(colon + 1);
  if (partitions < 1) {
    fprintf(stderr, "mock-cluster: bad partition count in \"%s\"\n", spec);
    return -1;
  }
  char name[256];
  size_t len = (size_t)(colon - spec);
  if (len >= sizeof(name)) return -1;
  memcpy(name, spec, len);
  name[len] = '\0';
  return create_topic(mc, name, partitions, brokers);
}

static void reply(rd_kafka_resp_err_t err) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) printf("ok\n");
  else printf("error %s\n", rd_kafka_err2str(err));
  fflush(stdout);
}

static void serve_commands(rd_kafka_mock_cluster_t *mc, int brokers) {
  char line[512];
  while (!stop_requested && fgets(line, sizeof(line), stdin)) {
    char cmd[32] = "", arg1[256] = "";
    int id = 0, n = 0;
    if (sscanf(line, "%31s", cmd) != 1) continue;
    if (strcmp(cmd, "quit") == 0) {
      printf("ok\n");
      fflush(stdout);
      return;
    } else if (strcmp(cmd, "down") == 0 && sscanf(line, "%*s %d", &id) == 1) {
      reply(rd_kafka_mock_broker_set_down(mc, id));
    } else if (strcmp(cmd, "up") == 0 && sscanf(line, "%*s %d", &id) == 1) {
      reply(rd_kafka_mock_broker_set_up(mc, id));
    } else if (strcmp(cmd, "leader") == 0 && sscanf(line, "%*s %255s %d %d", arg1, &n, &id) == 3) {
      reply(rd_kafka_mock_partition_set_leader(mc, arg1, n, id));
    } else if (strcmp(cmd, "request-errors") == 0 && sscanf(line, "%*s %d", &id) == 1) {
      rd_kafka_resp_err_t errors[64];
      size_t count = 0;
      int consumed = 0, code = 0;
      const char *p = line;
      /* Skip the command and the api key, then read codes until the end of the line. */
      for (int skip = 0; skip < 2; skip++) {
        sscanf(p, "%*s%n", &consumed);
        p += consumed;
      }
      while (count < 64 && sscanf(p, "%d%n", &code, &consumed) == 1) {
        errors[count++] = (rd_kafka_resp_err_t)code;
        p += consumed;
      }
      if (count == 0) {
        printf("error no error codes\n");
        fflush(stdout);
      } else {
        rd_kafka_mock_push_request_errors_array(mc, (int16_t)id, count, errors);
        reply(RD_KAFKA_RESP_ERR_NO_ERROR);
      }
    } else if (strcmp(cmd, "topic") == 0 && sscanf(line, "%*s %255s %d", arg1, &n) == 2) {
      if (create_topic(mc, arg1, n, brokers) == 0) printf("ok\n");
      else printf("error cannot create topic\n");
      fflush(stdout);
    } else {
      printf("error unknown command\n");
      fflush(stdout);
    }
  }
}

int main(int argc, char **argv) {
  int brokers = 3;
  int detach = 0;
  int first_topic = 1;
  for (; first_topic < argc; first_topic++) {
    if (strcmp(argv[first_topic], "--brokers") == 0 && first_topic + 1 < argc) {
      brokers = atoi(argv[++first_topic]);
    } else if (strcmp(argv[first_topic], "--detach") == 0) {
      detach = 1;
    } else {
      break;
    }
  }
  if (brokers < 1 || brokers > 16) {
    fprintf(stderr, "mock-cluster: --brokers must be 1..16\n");
    return 2;
  }
#ifdef __linux__
  if (!detach) prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
  /* No SA_RESTART: a signal interrupts the blocking read of stdin. */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  char errstr[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  /* Keep the bookkeeping client quiet: it never connects anywhere. */
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
  /* MOCK_CLUSTER_DEBUG=mock logs the cluster's own decisions (group states, timers) on stderr. */
  const char *debug = getenv("MOCK_CLUSTER_DEBUG");
  if (debug && *debug) {
    rd_kafka_conf_set(conf, "log_level", "7", errstr, sizeof(errstr));
    if (rd_kafka_conf_set(conf, "debug", debug, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
      fprintf(stderr, "mock-cluster: MOCK_CLUSTER_DEBUG: %s\n", errstr);
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (!rk) {
    fprintf(stderr, "mock-cluster: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) {
    fprintf(stderr, "mock-cluster: cannot create the mock cluster\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  int status = 0;
  for (int i = first_topic; i < argc; i++) {
    if (create_topic_spec(mc, argv[i], brokers) != 0) status = 1;
  }
  if (status == 0) {
    printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);
    if (detach) {
      while (!stop_requested) sleep(1);
    } else {
      serve_commands(mc, brokers);
    }
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return status;
}
