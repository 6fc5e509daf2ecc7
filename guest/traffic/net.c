// SPDX-License-Identifier: GPL-2.0-or-later
/* The TCP side channel: parameters, QP numbers and the rounds' handshakes. */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "traffic.h"

/* A peer that stops answering fails the run instead of hanging it: until
 * the parameters say how long an operation may take, this long. */
#define SOCKET_TIMEOUT_S 180

void net_set_timeout(int fd, unsigned int seconds) {
    struct timeval tv = {.tv_sec = seconds};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void set_options(int fd) {
    int one = 1;

    net_set_timeout(fd, SOCKET_TIMEOUT_S);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int net_listen(const char *port) {
    struct addrinfo hints = {
        .ai_family = AF_INET6, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    int one = 1, fd;

    if (getaddrinfo(NULL, port, &hints, &res)) {
        fprintf(stderr, "pib-traffic: bad port %s\n", port);
        return -1;
    }
    fd = socket(res->ai_family, res->ai_socktype, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, MAX_QPS + 1)) {
            perror("pib-traffic: listen");
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

int net_accept(int listen_fd) {
    int fd = accept(listen_fd, NULL, NULL);

    if (fd < 0) {
        perror("pib-traffic: accept");
        return -1;
    }
    set_options(fd);
    return fd;
}

int net_connect(const char *host, const char *port) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res, *ai;
    int fd = -1;

    if (getaddrinfo(host, port, &hints, &res)) {
        fprintf(stderr, "pib-traffic: cannot resolve %s\n", host);
        return -1;
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, 0);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "pib-traffic: cannot connect to %s:%s\n", host, port);
        return -1;
    }
    set_options(fd);
    return fd;
}

int send_all(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n <= 0) {
            perror("pib-traffic: send");
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int recv_all(int fd, void *buf, size_t len) {
    uint8_t *p = buf;

    while (len) {
        ssize_t n = recv(fd, p, len, 0);

        if (n <= 0) {
            fprintf(stderr, "pib-traffic: the peer %s\n",
                    n == 0 ? "closed the connection" : "did not answer");
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
